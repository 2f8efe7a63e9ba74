"""The leak sweep's report: stale EC2 resources, candidate colours not kept as leaks, kept ones with why."""

from __future__ import annotations

from tasks.planning import sweep_report

STALE_RESERVATION = {"kind": "capacity-reservation", "resource_id": "cr-1", "deployment": "d", "run_id": "r1",
                     "created_at": "2026-12-01T00:00:00Z", "ttl_hours": 24, "action": "would release"}


def _candidate(action: str, why: str = "its gate approval timed out") -> dict:
    return {"kind": "candidate-namespace", "resource_id": "d-green", "deployment": "d", "run_id": "",
            "created_at": "", "ttl_hours": "", "action": action, "why": why}


def test_a_candidate_not_kept_is_stale_with_the_ec2_leaks_and_a_kept_one_is_a_row_saying_why():
    deleted, kept = _candidate("would delete"), _candidate("kept", "run r2 is still deciding on it")
    result = sweep_report.with_candidates({"found": [], "stale": [STALE_RESERVATION]}, [deleted, kept])
    assert result["stale"] == [STALE_RESERVATION, deleted]
    assert result["candidates"] == [deleted, kept]
    rows = sweep_report.table(result)
    assert [(r["id"], r["action"]) for r in rows] == [
        ("cr-1", "would release"), ("d-green", "would delete"), ("d-green", "kept: run r2 is still deciding on it")]
    assert rows[0] == {"kind": "capacity-reservation", "id": "cr-1", "deployment": "d", "run": "r1",
                       "created": "2026-12-01T00:00:00Z", "ttl_h": 24, "action": "would release"}


def test_nothing_found_is_one_row_saying_so_and_the_input_is_left_as_it_was():
    result = {"found": [], "stale": []}
    merged = sweep_report.with_candidates(result, [])
    assert sweep_report.table(merged) == [{"kind": "-", "id": "nothing stale"}]
    assert result == {"found": [], "stale": []}
