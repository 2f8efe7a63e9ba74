"""`scripts/demo`'s stage lines: names, durations and progress from what the REST API answers."""

import datetime as dt
import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "demo_view", Path(__file__).resolve().parents[2] / "scripts" / "demo_view.py")
demo_view = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(demo_view)

NOW = dt.datetime(2026, 12, 4, 10, 0, 30, tzinfo=dt.timezone.utc)


def _run(state="COMPLETED", start="2026-12-04T10:00:00Z", end="2026-12-04T10:00:12.5Z", flow="validate-fabric"):
    return {"state_type": state, "state_name": state.title(), "start_time": start, "end_time": end,
            "flow_name": flow}


def test_a_finished_stage_reports_its_own_duration_and_a_running_one_the_time_so_far():
    assert demo_view.seconds(_run(), NOW) == pytest.approx(12.5)
    assert demo_view.seconds(_run("RUNNING", end=None), NOW) == pytest.approx(30.0)
    assert demo_view.seconds(_run("PENDING", start=None, end=None), NOW) == 0.0


def test_the_summing_up_artifact_wins_else_the_slowest_part():
    arts = [{"type": "progress", "key": "weights-a-n1", "data": 100.0},
            {"type": "progress", "key": "weights-a-total", "data": 40.0},
            {"type": "markdown", "key": "x", "data": "## no"}]
    assert demo_view.progress(arts) == 40.0
    parts = [{"type": "progress", "key": "fabric-a-loopback", "data": 100.0},
             {"type": "progress", "key": "fabric-a-pairs", "data": 25.0}]
    assert demo_view.progress(parts) == 25.0
    assert demo_view.progress([]) is None
    assert demo_view.progress([{"type": "progress", "key": "k", "data": 130.0}]) == 100.0


def test_a_line_names_the_stage_as_pdlift_does_and_shows_progress_while_it_runs():
    line = demo_view.line(_run("RUNNING", end=None), 42.0, NOW)
    assert line.split()[:4] == ["fabric", "30.0", "s", "running"] and "42.0%" in line
    done = demo_view.line(_run(flow="benchmark-gate"), 99.0, NOW)
    assert done.split()[0] == "benchmark+gate" and "99.0%" in done and "completed" in done
    assert "%" not in demo_view.line(_run(flow="reserve-capacity"), None, NOW)
    assert demo_view.stage_name("something-else") == "something-else"
