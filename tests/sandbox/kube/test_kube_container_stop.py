"""How the stand-in's kubelet stops a container, as a container runtime does: SIGTERM to the main
process only (an engine shuts its own children down: vLLM's API server stops its engine core), then
every process left is killed once the main process is gone or the grace period ends; and a main
process that exits takes the container's other processes with it."""

from __future__ import annotations

import os
import time

from tests.fixtures.kube import wait_for
from tests.sandbox.kube.conftest import pod, wait_running_ready

# The main process starts a child that notes every signal it gets in a file and ignores SIGTERM
# (as a worker waiting for its parent to shut it down would), writes the child's pid, then waits.
# On SIGTERM the main process notes it and exits a moment later.
FAMILY = r"""
import os, signal, subprocess, sys, time
out = sys.argv[1]
child = subprocess.Popen([sys.executable, "-c", '''
import os, signal, sys, time
def note(signum, _):
    open(sys.argv[1] + ".child", "a").write(f"signal {signum}\\n")
signal.signal(signal.SIGTERM, note)
open(sys.argv[1] + ".child", "a").write(f"pid {os.getpid()}\\n")
while True:
    time.sleep(0.1)
''', out])
def stop(signum, _):
    open(out + ".main", "a").write(f"signal {signum}\n")
    time.sleep(0.3)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
while True:
    time.sleep(0.1)
"""
CRASH = r"""
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(300)",
                  sys.argv[1] + ".child"])
time.sleep(1.5)
sys.exit(3)
"""


def _child_pid(path: str) -> int | None:
    try:
        lines = [line for line in open(path).read().splitlines() if line.startswith("pid ")]
    except OSError:
        return None
    return int(lines[0].split()[1]) if lines else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie waiting for its parent counts as gone
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_deleted_pods_main_process_alone_gets_sigterm_and_what_it_leaves_is_killed(core, kube_namespace, tmp_path):
    out = str(tmp_path / "family")
    core.create_namespaced_pod(kube_namespace, pod("family", ["python3", "-c", FAMILY, out]))
    wait_running_ready(core, kube_namespace, "family")
    child = wait_for(lambda: _child_pid(out + ".child"), what="the child to start")
    core.delete_namespaced_pod("family", kube_namespace)
    wait_for(lambda: not _alive(child), timeout=10, what="the child to be killed with its container")
    assert open(out + ".main").read() == "signal 15\n"  # the main process was asked to stop
    assert "signal" not in open(out + ".child").read()  # the child never was: only killed at the end


def test_a_main_process_that_exits_takes_the_containers_other_processes_with_it(core, kube_namespace, tmp_path):
    out = str(tmp_path / "crash")
    core.create_namespaced_pod(kube_namespace, pod("crash", ["python3", "-c", CRASH, out]))
    pid = wait_for(lambda: os.path.exists(out + ".child") and open(out + ".child").read(), what="the child")
    started = time.monotonic()
    wait_for(lambda: not _alive(int(pid)), timeout=15, what="the child to go with its crashed main process")
    assert time.monotonic() - started < 12
