"""The chaos bench's verdict on a trial: each invariant breaks the trial on its own, at its
boundary, and a trial that keeps them all is converged or a clean failure."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import replace
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "scripts" / "bench"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


judge_module = _load("chaos_judge")
Observed, judge = judge_module.Observed, judge_module.judge

BILLING = ("stage weights failed: S3 unreachable\nstill billing $126.59/h for 4 resource(s); tear down with: "
           "pdlift teardown bp.yaml --run-id r1")
PROMOTED = Observed("COMPLETED", verdict="PASS", promoted_colour="blue", reservations_created=1, fleet_nodes=2,
                    instances_running=2, weights_fetched=100, weights_total=100, judged_at=1000.0,
                    production_seen={"blue": 1002.5})


def test_a_promoted_run_that_keeps_every_invariant_converged():
    assert (judge(PROMOTED).outcome, judge(PROMOTED).violations) == ("converged: PASS -> promoted", [])


def test_a_rolled_back_gate_is_a_decision_and_a_failure_naming_cost_and_teardown_is_clean():
    rolled = Observed("FAILED", verdict="FAIL", logs="chaos-1p1d: candidate blue rolled back (gate FAIL; ...)",
                      reservations_created=1)
    assert (judge(rolled).outcome, judge(rolled).violations) == ("converged: FAIL -> rolled back", [])
    clean = Observed("FAILED", logs=BILLING, reservations_created=1)
    assert (judge(clean).outcome, judge(clean).violations) == ("clean failure", [])


@pytest.mark.parametrize("logs", [BILLING.replace("still billing", "billing"), BILLING.replace("/h", ""),
                                  BILLING.replace("pdlift teardown", "teardown"), ""])
def test_a_failure_that_does_not_name_cost_per_hour_and_the_teardown_is_a_violation(logs):
    judged = judge(Observed("CRASHED", "worker killed", logs=logs))
    assert judged.outcome == "crashed" and "without naming what bills" in judged.violations[0]


def test_a_run_that_never_ends_is_stuck():
    assert judge(Observed(None, timeout_s=1200)).violations == ["no end within 1200 s"]
    # A run that completed without a promotion (nothing decided) is no clean failure either.
    assert judge(Observed("COMPLETED", logs=BILLING)).violations


@pytest.mark.parametrize("made, bad", [(0, True), (1, False), (2, True)])
def test_a_decided_run_made_exactly_one_reservation(made, bad):
    assert bool(judge(replace(PROMOTED, reservations_created=made)).violations) is bad


@pytest.mark.parametrize("made, bad", [(0, False), (1, False), (2, True)])
def test_a_failed_run_made_at_most_one_reservation(made, bad):
    assert bool(judge(Observed("FAILED", logs=BILLING, reservations_created=made)).violations) is bad


@pytest.mark.parametrize("running, bad", [(1, True), (2, False), (3, True)])
def test_a_promoted_fleet_runs_as_many_instances_as_it_has_nodes(running, bad):
    assert bool(judge(replace(PROMOTED, instances_running=running)).violations) is bad


@pytest.mark.parametrize("fetched, bad", [(60, False), (61, True)])
def test_bytes_verified_when_the_fault_hit_are_never_fetched_again(fetched, bad):
    o = replace(PROMOTED, weights_fetched=fetched, weights_total=100, verified_at_fault=40)
    assert bool(judge(o).violations) is bad
    # Staging that had finished before the fault fetched nothing after it: nothing to compare.
    assert judge(replace(o, weights_fetched=100, weights_done_before_fault=True)).violations == []


def test_production_on_any_colour_but_the_promoted_one_is_a_violation():
    assert "production routed to ['green']" in judge(replace(PROMOTED, production_seen={
        "blue": 1002.5, "green": 990.0})).violations[0]
    rolled = Observed("FAILED", verdict="FAIL", logs="rolled back", production_seen={"blue": 5.0})
    assert judge(rolled).violations == ["production routed to ['blue'] without a passed gate"]


@pytest.mark.parametrize("first_seen, bad", [(999.9, True), (1000.0, False), (1000.4, False)])
def test_production_on_the_promoted_colour_before_its_gate_judged_is_a_violation(first_seen, bad):
    judged = judge(replace(PROMOTED, production_seen={"blue": first_seen}))
    assert any("before its gate passed" in v for v in judged.violations) is bad
    assert judge(replace(PROMOTED, judged_at=None)).violations  # promoted with no gate report at all


def test_anything_billing_or_any_namespace_left_after_the_teardown_is_a_violation():
    assert judge(replace(PROMOTED, billing_after_teardown=("cr-1",))).violations == [
        "after teardown still billing: ['cr-1']"]
    assert judge(replace(PROMOTED, teardown_error="exit 1")).violations
    assert judge(replace(PROMOTED, namespaces_after_teardown=("chaos-1p1d-blue",))).violations == [
        "namespaces left after teardown: ['chaos-1p1d-blue']"]


def test_the_campaign_is_planned_from_the_seed_alone_and_each_fault_comes_once_before_any_twice():
    sys.path.insert(0, str(BENCH))
    chaos = _load("chaos")
    every = tuple(chaos.faults.BY_NAME)
    plan = chaos.plan_trials(25, 7, every)
    assert plan == chaos.plan_trials(25, 7, every) and plan != chaos.plan_trials(25, 8, every)
    assert [t.fault for t in plan[:len(every)]] == list(every)
    for t in plan:
        assert t.stage in chaos.faults.BY_NAME[t.fault].stages
        assert 0 <= t.moment_s <= chaos.MOMENT_MAX_S[t.stage] and 5 <= t.outage_s <= 30 and 3 <= t.burst <= 8
    assert {t.run_id for t in plan} == {f"chaos-7-{i}" for i in range(25)}
