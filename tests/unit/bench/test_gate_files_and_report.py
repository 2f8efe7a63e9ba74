"""Results and baselines survive JSON, and the gate report renders for people and for Prefect."""

import json

import pytest

from blueprints.schema import BaselinePoint, BaselineSpec, GateRule, SloSpec
from tasks.errors import ConfigError
from tasks.planning.bench_baseline import (baseline_from_spec, baseline_from_summaries, dumps_baseline,
                                           dumps_results, loads_baseline, loads_results)
from tasks.planning.bench_report import render_markdown, report_to_dict, rows_for_table
from tasks.planning.gate import Verdict, evaluate_gate
from tests.unit.bench.helpers import gate_spec, run

TPOT = GateRule(metric="tpot_mean", max_ratio=1.10, critical=True)


@pytest.fixture(scope="module")
def runs():
    return run(120, seed=1, repeats=2), run(120, seed=2, repeats=2, tpot_ms=12 * 1.2)


def test_results_survive_a_json_round_trip(runs):
    text = dumps_results(runs, run_id="run-7", blueprint="sandbox-2p2d")
    assert loads_results(text) == list(runs)


def test_a_recorded_baseline_gates_exactly_like_the_run_it_came_from(runs):
    base, cand = runs
    recorded = baseline_from_summaries([base], source="sandbox run", run_id="run-6",
                                       created_at="2026-01-01T00:00:00Z", blueprint="sandbox-2p2d")
    loaded = loads_baseline(dumps_baseline(recorded))
    assert (loaded.run_id, loaded.blueprint, loaded.version) == ("run-6", "sandbox-2p2d", 1)
    gate = gate_spec(TPOT, GateRule(metric="e2e_p99", max_ratio=1.5))
    assert evaluate_gate([cand], loaded, gate) == evaluate_gate([cand], recorded, gate)


def test_the_baseline_document_has_the_versioned_shape(runs):
    doc = json.loads(dumps_baseline(baseline_from_summaries([runs[0]], source="s", run_id="run-6")))
    assert set(doc) >= {"version", "run_id", "created_at", "blueprint", "scenarios"}
    (point,) = doc["scenarios"]["isl-3k"]
    assert point["concurrency"] == 8 and point["completed"] == 240
    assert point["metrics"]["tpot_mean"] == pytest.approx(runs[0].tpot.mean)
    assert point["samples"]["tpot"] and point["samples"]["itl"] == []     # ITL samples left out by default


def test_blueprint_figures_become_a_baseline_without_samples():
    spec = BaselineSpec(source="published", cv={"ttft": 0.1, "tpot": 0.1}, scenarios={"isl-3k": [
        BaselinePoint(concurrency=8, completed=300, ttft_ms_mean=120, tpot_ms_mean=12, output_tokens_per_s=900)]})
    entry = baseline_from_spec(spec).lookup("isl-3k", 8)
    assert dict(entry.figures) == {"ttft_mean": 120, "tpot_mean": 12, "output_tokens_per_s": 900}
    assert entry.samples is None and entry.completed == 300 and dict(entry.cv) == {"ttft": 0.1, "tpot": 0.1}


@pytest.mark.parametrize("text, message", [
    ("not json", "not JSON"),
    ('{"version": 99, "scenarios": {}}', "version 99"),
    ('{"version": 1}', "malformed"),
    ('{"version": 1, "scenarios": {"a": [{"concurrency": 1, "metrics": {"tpot_avg": 1}}]}}', "tpot_avg"),
])
def test_a_bad_baseline_document_is_a_config_error_that_says_why(text, message):
    with pytest.raises(ConfigError, match=message):
        loads_baseline(text)


def test_a_bad_results_document_is_a_config_error():
    with pytest.raises(ConfigError, match="malformed"):
        loads_results('{"version": 1, "summaries": [{"scenario": "x"}]}')


def test_the_markdown_rationale_names_the_outcome_the_reason_and_every_scenario(runs):
    base, cand = runs
    other = run(120, seed=3, scenario="isl-60k", concurrency=4)
    report = evaluate_gate([cand, other], baseline_from_summaries([base], source="s"), gate_spec(TPOT))
    text = render_markdown(report)
    assert text.startswith("# Promotion gate: FAIL")
    assert "## isl-3k" in text and "## isl-60k" in text and "### concurrency 8" in text
    tpot_lines = [line for line in text.splitlines() if line.startswith("| tpot_mean")]
    assert len(tpot_lines) == 2                                   # one per scenario
    assert "FAIL (critical)" in tpot_lines[0] and "p=" in tpot_lines[0]
    assert "INCONCLUSIVE" in tpot_lines[1] and "no point for scenario isl-60k" in tpot_lines[1]


def test_table_rows_are_json_safe_even_for_an_infinite_ratio(runs):
    base, _ = runs
    gate = gate_spec(TPOT, GateRule(metric="error_rate", max_ratio=2.0, report_only=True))
    report = evaluate_gate([run(120, seed=4, errors=1)], baseline_from_summaries([base], source="s"), gate)
    rows = rows_for_table(report)
    json.dumps(rows, allow_nan=False)
    json.dumps(report_to_dict(report), allow_nan=False)
    (errors,) = [r for r in rows if r["metric"] == "error_rate" and r["ratio"] != "—"]
    assert errors["ratio"] == "∞" and errors["verdict"].endswith("(report only)")
    assert {"metric", "candidate", "baseline", "ratio", "verdict"} <= set(rows[0])


def test_table_rows_can_be_taken_per_scenario(runs):
    base, cand = runs
    report = evaluate_gate([cand, run(60, seed=3, scenario="isl-60k")], baseline_from_summaries([base], source="s"),
                           gate_spec(TPOT, slo=SloSpec(tpot_ms=100)))
    assert {r["scenario"] for r in rows_for_table(report, "isl-60k")} == {"isl-60k"}
    assert {r["scenario"] for r in rows_for_table(report, "isl-3k")} == {"isl-3k"}
    assert len(rows_for_table(report)) == len(report.rows)
