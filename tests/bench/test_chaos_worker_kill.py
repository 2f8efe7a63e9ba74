"""The chaos bench's worker-sigkill fault, on real processes: the worker, the flow run it started in
a session of its own and everything below are killed, the worker reaped; the operator's part
follows (the orphaned run marked crashed unless it had ended, a worker started again). The whole
fault against a real worker and Prefect server is the campaign's: `scripts/bench/chaos.py
--faults worker-sigkill`; the suite's takeover test kills a worker the same way."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.bench.test_chaos_judge import _load

chaos = _load("chaos")
# A process worker's shape: the flow run in a session of its own (Prefect 3's process worker),
# with a child of its own.
WORKER = ("import subprocess, time; "
          "subprocess.Popen(['sh', '-c', 'sleep 60 & wait'], start_new_session=True); time.sleep(60)")


def _worker() -> tuple[subprocess.Popen, list[int]]:
    """A worker started by this process, once its whole tree is up: (it, the pids below it)."""
    from sandbox.orchestrator.procs import descendants

    # In a session of its own, as scripts/demo.py starts it (the fault kills the worker's group).
    worker = subprocess.Popen([sys.executable, "-c", WORKER], start_new_session=True)
    for _ in range(200):
        below = descendants(worker.pid)
        if len(below) >= 2:  # the flow run's shell and its sleep
            return worker, below
        time.sleep(0.05)
    worker.kill()
    raise AssertionError("the worker's flow run never started")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited; only its parent's wait is left


def _survivors(pids: list[int], within_s: float = 30.0) -> list[int]:
    """Those of ``pids`` still alive after ``within_s``. A SIGKILLed process exits when the
    scheduler next runs it, not when kill() returns: in scripts/test's other lane, which gets only
    the CPU the measured lane leaves, one was still there at the first look (CI)."""
    deadline = time.monotonic() + within_s
    while (alive := [pid for pid in pids if _alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive


class Recorder:
    """The bench's view of the stack, recording what the fault asks of it."""

    def __init__(self, worker_pid: int | None, run_state: str):
        self.pid, self.run_state = worker_pid, run_state
        self.calls: list[tuple] = []

    def worker_pid(self) -> int | None:
        return self.pid

    def flow_run(self, flow_run_id: str) -> dict:
        return {"id": flow_run_id, "state_type": self.run_state}

    def http(self, method: str, path: str, body: dict | None = None) -> dict:
        self.calls.append((method, path, body))
        return {}

    def start_worker(self) -> None:
        self.calls.append(("start_worker",))


def _trial() -> object:
    return chaos.Trial(index=0, seed=3, fault="worker-sigkill", stage="weights", moment_s=1.0, outage_s=0,
                       burst=0, code="")


def test_the_worker_its_flow_run_in_a_session_of_its_own_and_its_children_are_all_killed_and_the_run_re_armed():
    worker, below = _worker()
    stack = Recorder(worker.pid, "RUNNING")
    try:
        done = chaos.inject(stack, _trial(), "run-1", [])
        survivors = _survivors(below)
    finally:
        for pid in (worker.pid, *below):  # nothing left behind should the fault have missed some
            try:
                os.kill(pid, 9)
            except OSError:
                pass
    assert done == f"killed the worker's tree ({1 + len(below)} processes)"
    assert not Path(f"/proc/{worker.pid}").exists()  # killed, and reaped by the fault (not a zombie)
    assert survivors == []
    assert stack.calls == [
        ("POST", "/flow_runs/run-1/set_state",
         {"state": {"type": "CRASHED", "message": "chaos: worker killed"}, "force": True}),
        ("start_worker",)]


def test_a_run_that_had_ended_keeps_its_end_and_with_no_worker_running_nothing_is_killed():
    stack = Recorder(None, "COMPLETED")
    assert chaos.inject(stack, _trial(), "run-2", []) == "killed the worker's tree (0 processes)"
    assert stack.calls == [("start_worker",)]


def test_reaping_a_child_that_does_not_exit_gives_up_at_its_bound():
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        started = time.monotonic()
        assert chaos._reap(sleeper.pid, timeout_s=0.3) is False
        assert 0.3 <= time.monotonic() - started < 5
    finally:
        sleeper.kill()
    assert chaos._reap(sleeper.pid, timeout_s=5) is True


def test_the_worker_is_found_by_the_demos_pid_file_and_started_again_as_a_process_worker_of_the_pool(tmp_path):
    from types import SimpleNamespace

    started: list[tuple] = []
    stack = object.__new__(chaos.Stack)  # without the sandbox and Prefect server a campaign brings up
    stack.demo = SimpleNamespace(DEMO=tmp_path, start=lambda name, argv, env: started.append((name, argv[1:], env)))
    stack.env = {"PREFECT_API_URL": "http://127.0.0.1:1/api"}
    assert stack.worker_pid() is None  # none started yet: the fault kills nothing
    (tmp_path / "worker.pid").write_text("4242")
    assert stack.worker_pid() == 4242
    stack.start_worker()
    assert started == [("worker", ["worker", "start", "--pool", "pdlift", "--type", "process"], stack.env)]
