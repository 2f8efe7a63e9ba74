"""The demo's steps: a tool that hangs is stopped after the step's limit and named, with its output in the log."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
import demo  # noqa: E402


@pytest.fixture()
def demo_log(tmp_path, monkeypatch):
    monkeypatch.setattr(demo, "DEMO", tmp_path)
    monkeypatch.setattr(demo, "LOG", tmp_path / "demo.log")
    return tmp_path / "demo.log"


def test_a_hung_step_is_stopped_at_its_limit_and_named(demo_log, tmp_path):
    marker = tmp_path / "grandchild-survived"
    # The tool's own child too (its process group): it would write the marker after 3 s.
    hang = [sys.executable, "-c", "import subprocess, sys, time; print('started', flush=True); "
            f"subprocess.Popen(['sh', '-c', 'sleep 3; touch {marker}']); time.sleep(60)"]
    started = time.monotonic()
    with pytest.raises(SystemExit, match=r"demo: hanger did not finish within 1 s and was stopped"):
        demo.step("hanger", hang, timeout_s=1)
    assert time.monotonic() - started < 10
    assert "started" in demo_log.read_text()
    time.sleep(3.5)
    assert not marker.exists()


def test_a_step_within_its_limit_returns_its_time_and_a_failing_one_names_its_exit(demo_log):
    assert demo.step("quick", [sys.executable, "-c", "print('fine')"], timeout_s=30) < 30
    assert "fine" in demo_log.read_text()
    with pytest.raises(SystemExit, match=r"demo: broken failed \(exit 3\)"):
        demo.step("broken", [sys.executable, "-c", "raise SystemExit(3)"], timeout_s=30)


def test_a_process_that_has_exited_is_not_alive_and_this_one_is():
    import os
    import subprocess

    gone = subprocess.Popen(["true"])
    gone.wait()
    assert demo._alive(gone.pid) is False
    assert demo._alive(os.getpid()) is True
