"""scripts/cpu-group: the cgroups scripts/test runs its lanes in, the measured lane's of nice 0's
weight, the other lane's of nice 10's, each holding every descendant of its lane, sessions of their
own included (tests/lanes.py and the script say why)."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

SCRIPT = str(Path(__file__).resolve().parents[2] / "scripts" / "cpu-group")


def _in_group(cgroup_lines: str, name: str) -> bool:
    """Whether /proc/<pid>/cgroup puts the process in ``name`` for the cpu controller (v1) or the
    unified hierarchy (v2)."""
    for line in cgroup_lines.splitlines():
        _, controllers, path = line.split(":", 2)
        if ("cpu" in controllers.split(",") or controllers == "") and path == "/" + name:
            return True
    return False


def _create(level: str = "low") -> Path | None:
    """A new group, or None where this machine does not let us make one (not root, no cpu
    controller: scripts/test then runs its lanes at nice 0 and 19 only, and says so)."""
    name = "pdlift-test-probe-" + uuid.uuid4().hex[:6]
    made = subprocess.run([SCRIPT, "create", name, level], capture_output=True, text=True, timeout=30)
    if made.returncode != 0:
        assert made.returncode == 1 and made.stdout == "", made
        return None
    group = Path(made.stdout.strip())
    assert group.name == name
    return group


@pytest.mark.parametrize("level, shares, weight", [("normal", "1024", "100"), ("low", "110", "10")])
def test_a_new_session_started_in_the_group_stays_in_it_and_remove_takes_the_group_away(level, shares, weight):
    group = _create(level)
    if group is None:
        return
    name = group.name
    try:
        # nice 0's weight is 1024 (v1) or 100 (v2), nice 10's 110 or 10
        v1, v2 = group / "cpu.shares", group / "cpu.weight"
        assert (v1.read_text().strip() == shares) if v1.exists() else (v2.read_text().strip() == weight)
        seen = subprocess.run([SCRIPT, "run", str(group), "setsid", "-w", "cat", "/proc/self/cgroup"],
                              capture_output=True, text=True, timeout=30)
        assert seen.returncode == 0, seen.stderr
        assert _in_group(seen.stdout, name), seen.stdout
    finally:
        subprocess.run([SCRIPT, "remove", str(group)], timeout=30)
    assert not group.exists()


def test_a_level_other_than_normal_or_low_is_refused_and_makes_no_group():
    name = "pdlift-test-probe-" + uuid.uuid4().hex[:6]
    made = subprocess.run([SCRIPT, "create", name, "high"], capture_output=True, text=True, timeout=30)
    assert made.returncode == 2 and made.stdout == "" and "normal|low" in made.stderr
    assert not Path("/sys/fs/cgroup/cpu", name).exists() and not Path("/sys/fs/cgroup", name).exists()


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


def test_stop_ends_every_process_in_the_group_a_new_session_and_one_that_ignores_sigterm_included():
    """What an interrupted scripts/test does before it removes its groups: without it, the servers
    the killed pytest had started stayed in the groups."""
    group = _create()
    if group is None:
        return
    started = [subprocess.Popen([SCRIPT, "run", str(group), "setsid", "-w", "sleep", "60"]),
               subprocess.Popen([SCRIPT, "run", str(group), "bash", "-c", "trap '' TERM; sleep 60 & wait"])]
    try:
        for _ in range(100):  # until all three processes (setsid's sleep, bash and its sleep) are in
            if len((group / "cgroup.procs").read_text().split()) >= 3:
                break
            subprocess.run(["sleep", "0.05"])
        stopped = subprocess.run([SCRIPT, "stop", str(group)], capture_output=True, text=True, timeout=60)
        assert stopped.returncode == 0, stopped.stderr
        assert (group / "cgroup.procs").read_text().split() == []
    finally:
        for p in started:
            p.kill()
            p.wait(timeout=10)
        subprocess.run([SCRIPT, "remove", str(group)], timeout=30)
    assert not group.exists()
