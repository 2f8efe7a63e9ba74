"""scripts/low-cpu-group: the cgroup scripts/test runs its other lane in, of nice 10's weight, and
holding every descendant of the lane, sessions of their own included (tests/lanes.py says why)."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

SCRIPT = str(Path(__file__).resolve().parents[2] / "scripts" / "low-cpu-group")


def _in_group(cgroup_lines: str, name: str) -> bool:
    """Whether /proc/<pid>/cgroup puts the process in ``name`` for the cpu controller (v1) or the
    unified hierarchy (v2)."""
    for line in cgroup_lines.splitlines():
        _, controllers, path = line.split(":", 2)
        if ("cpu" in controllers.split(",") or controllers == "") and path == "/" + name:
            return True
    return False


def _create() -> Path | None:
    """A new group, or None where this machine does not let us make one (not root, no cpu
    controller: scripts/test then runs the other lane at nice 19 only, and says so)."""
    name = "pdlift-test-probe-" + uuid.uuid4().hex[:6]
    made = subprocess.run([SCRIPT, "create", name], capture_output=True, text=True, timeout=30)
    if made.returncode != 0:
        assert made.returncode == 1 and made.stdout == "", made
        return None
    group = Path(made.stdout.strip())
    assert group.name == name
    return group


def test_a_new_session_started_in_the_group_stays_in_it_and_remove_takes_the_group_away():
    group = _create()
    if group is None:
        return
    name = group.name
    try:
        shares, weight = group / "cpu.shares", group / "cpu.weight"
        # nice 10's weight: 110 of nice 0's 1024 (v1), 10 of 100 (v2)
        assert (shares.read_text().strip() == "110") if shares.exists() else (weight.read_text().strip() == "10")
        seen = subprocess.run([SCRIPT, "run", str(group), "setsid", "-w", "cat", "/proc/self/cgroup"],
                              capture_output=True, text=True, timeout=30)
        assert seen.returncode == 0, seen.stderr
        assert _in_group(seen.stdout, name), seen.stdout
    finally:
        subprocess.run([SCRIPT, "remove", str(group)], timeout=30)
    assert not group.exists()


def test_a_group_that_still_holds_a_process_is_left_in_place_and_said_so():
    group = _create()
    if group is None:
        return
    sleeper = subprocess.Popen([SCRIPT, "run", str(group), "sleep", "30"])
    try:
        for _ in range(100):  # until the sleeper is in the group
            if (group / "cgroup.procs").read_text().split():
                break
            subprocess.run(["sleep", "0.05"])
        kept = subprocess.run([SCRIPT, "remove", str(group)], capture_output=True, text=True, timeout=30)
        assert kept.returncode == 0 and "still has processes; left in place" in kept.stderr
        assert group.exists()
    finally:
        sleeper.kill()
        sleeper.wait(timeout=10)
        subprocess.run([SCRIPT, "remove", str(group)], timeout=30)
    assert not group.exists()
