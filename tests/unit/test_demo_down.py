"""`scripts/demo --down` stops the flow runs the demo's worker left running (Prefect starts each in a
session of its own), and nothing else."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
import demo  # noqa: E402

# A process that outlives a SIGTERM (as a flow run's engine may, while it reports its state), in a
# session of its own whose parent is gone (as the worker is after `--down`): its pid on stdout.
STUBBORN = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)")


def _orphan(env: dict[str, str]) -> int:
    out = subprocess.run(["sh", "-c", f'setsid "$0" -c "$1" </dev/null >/dev/null 2>&1 & echo $!',
                          sys.executable, STUBBORN], env=env, capture_output=True, text=True, timeout=10)
    pid = int(out.stdout)
    deadline = time.monotonic() + 10  # until it ignores SIGTERM (SigIgn, bit 15 of the mask)
    while time.monotonic() < deadline and not _ignores_sigterm(pid):
        time.sleep(0.05)
    assert _ignores_sigterm(pid)
    return pid


def _ignores_sigterm(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status").read_text()
    mask = next(line.split()[1] for line in status.splitlines() if line.startswith("SigIgn:"))
    return bool(int(mask, 16) & (1 << (15 - 1)))


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except OSError:
        return False


@pytest.fixture()
def processes(tmp_path, monkeypatch):
    monkeypatch.setattr(demo, "DEMO", tmp_path / "demo")
    monkeypatch.setattr(demo, "FLOW_RUN_GRACE_S", 1)
    started: list[int] = []
    yield started
    for pid in started:
        try:
            os.kill(pid, 9)
        except OSError:
            pass


def test_down_stops_the_demos_flow_runs_through_a_sigterm_they_ignore_and_nothing_else(tmp_path, processes):
    base = {**os.environ, "PREFECT_HOME": str(tmp_path / "demo" / "prefect-home")}
    run = _orphan({**base, "PREFECT__FLOW_RUN_ID": "0b1e-demo-run"})
    worker_like = _orphan(base)  # the demo's home, no flow run: a worker or the server, not a run
    elsewhere = _orphan({**base, "PREFECT_HOME": str(tmp_path / "other-home"), "PREFECT__FLOW_RUN_ID": "0b1e-other"})
    processes += [run, worker_like, elsewhere]
    assert demo.flow_run_processes() == [run]

    demo.stop_flow_runs()

    deadline = time.monotonic() + 5
    while _alive(run) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(run)
    assert _alive(worker_like) and _alive(elsewhere)
    assert demo.flow_run_processes() == []
