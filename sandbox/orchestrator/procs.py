"""Background processes started and stopped by PID, and nothing else.

Every process is started in its own session (so it outlives `scripts/sandbox up` and is the
leader of its own process group) and is only ever signalled after checking it is still ours:
alive, not a zombie, and its command line names our state directory.
That check is what keeps a recycled PID from costing someone else their process.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: split after it.
    return raw[raw.rindex(")") + 2:].split()


def alive(pid: int) -> bool:
    """Running and not a zombie (an exited child nobody has reaped yet is not alive)."""
    fields = _stat_fields(pid)
    if fields is None:
        return False
    if fields[0] in ("Z", "X"):
        _reap(pid)
        return False
    return True


def process_group(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[2]) if fields else None


def cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def belongs_to(pid: int, marker: Path) -> bool:
    """Alive and started for `marker` (a state dir): its argv names that directory. (Not its
    working directory: a developer's shell sitting in the state dir is not ours.)"""
    if pid <= 1 or pid == os.getpid() or not alive(pid):
        return False
    # The state dir as a whole path component: /tmp/s must not match /tmp/s2.
    named = re.compile(re.escape(str(marker)) + r"(/|$)")
    return any(named.search(arg) for arg in cmdline(pid))



def descendants(pid: int) -> list[int]:
    """Every live process below pid (Linux /proc), children first."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(0), []):
            found.append(child)
            todo.append(child)
    return found

def _reap(pid: int) -> None:
    """Collect an exited child of this process (fixtures start children of pytest)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def spawn(argv: list[str], env: dict[str, str], log_file: Path, pid_file: Path,
          cwd: Path) -> int:
    """Start argv detached, output to log_file; write its PID to pid_file."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as log:
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    pid_file.write_text(f"{proc.pid}\n")
    # Popen's handle is dropped on purpose: stop() reaps by PID, and `up` exits anyway.
    proc.returncode = 0  # keeps Popen.__del__ from warning that the child still runs
    return proc.pid


def read_pid(pid_file: Path) -> int | None:
    try:
        return int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _wait_gone(pids: list[int], timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while True:
        left = [p for p in pids if alive(p)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and process_group(int(entry.name)) == pgid:
            members.append(int(entry.name))
    return [p for p in members if p != os.getpid() and alive(p)]


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def stop(pid: int, marker: Path, grace_s: float = 10.0, whole_group: bool = False) -> str:
    """SIGTERM, then SIGKILL after grace_s; then the same for anything left in its process
    group (spawn() made the process a group leader, so the group is its own descendants).
    whole_group: signal the group at once (for leftovers such as `unshare --fork`, which
    ignores SIGTERM while its child runs). Returns 'not running', 'not ours', 'stopped' or
    'killed'."""
    if not alive(pid):
        # It died (crashed?) but may have left children in its group: stop those that are ours.
        _stop_all([p for p in _group_members(pid) if belongs_to(p, marker)], grace_s)
        return "not running"
    if not belongs_to(pid, marker):
        return "not ours"
    own_group = process_group(pid) == pid
    targets = _group_members(pid) if whole_group and own_group else [pid]
    for p in targets:
        _signal(p, signal.SIGTERM)
    outcome = "stopped"
    if _wait_gone([pid], grace_s):
        _signal(pid, signal.SIGKILL)
        _wait_gone([pid], 2.0)
        outcome = "killed"
    _reap(pid)
    if own_group:
        _stop_all(_group_members(pid), grace_s)
    return outcome


def _stop_all(members: list[int], grace_s: float) -> None:
    for p in members:
        _signal(p, signal.SIGTERM)
    for p in _wait_gone(members, min(grace_s, 3.0)):
        _signal(p, signal.SIGKILL)
    _wait_gone(members, 2.0)


def _session(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[3]) if fields else None


def session_leaders(marker: Path) -> list[int]:
    """Live session leaders started for `marker`: what spawn() starts, and what components
    start the same way (node sshds), even after their parent died. A process someone runs
    from a shell (`tail -f <state>/...`) belongs to the shell's session and is not listed."""
    mine = {os.getpid(), os.getppid(), _session(os.getpid())}
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            pid = int(entry.name)
            if pid not in mine and _session(pid) == pid and belongs_to(pid, marker):
                found.append(pid)
    return sorted(found)


def stop_child(proc: subprocess.Popen, signals=((signal.SIGTERM, 15), (signal.SIGINT, 5), (signal.SIGKILL, 5))) -> None:
    """Stop a child this process started in its own session (its process group), one signal after
    another, each with its grace (a Prefect worker wants SIGTERM, then SIGINT). Nothing to check:
    the Popen is ours, and reaped by ``wait``."""
    for sig, grace in signals:
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except OSError:
            return
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            continue
