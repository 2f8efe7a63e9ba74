"""recreate's downtime estimate and what auto picks on the blueprint's own fleet."""

from __future__ import annotations

import pytest

from tasks.planning import update_plan
from tasks.planning.manifests import render_stack
from tasks.planning.manifests.common import SHUTDOWN_TIMEOUT_S
from tasks.planning.plan import make_plan
from tasks.planning.strategy import StrategyRefused
from tests.unit.manifests.helpers import REFERENCE, variant


def _estimate(bp=REFERENCE, measured=None):
    return update_plan.recreate_downtime(bp, make_plan(bp).timeline, measured)


def test_the_estimate_is_drain_plus_bring_up_plus_benchmark_plus_switch():
    d, timeline = _estimate(), make_plan(REFERENCE).timeline
    assert d.phases_s["bring_up"] == timeline.of("deploy").expected_s
    assert d.phases_s["benchmark"] == timeline.of("benchmark").expected_s
    assert d.expected_s == pytest.approx(sum(d.phases_s.values()), abs=0.2)
    assert d.worst_s > d.expected_s


def test_a_measured_bring_up_replaces_the_projection():
    d = _estimate(measured=12.5)
    assert d.phases_s["bring_up"] == 12.5 and "measured bring-up" in d.basis


def test_the_drain_is_the_longest_request_under_the_slos_capped_by_the_shutdown_timeout():
    slo = REFERENCE.gate.slo
    longest = max(s.output_tokens for s in REFERENCE.benchmark.scenarios)
    expected = (slo.ttft_ms + longest * slo.tpot_ms) / 1000
    assert update_plan.drain_s(REFERENCE) == pytest.approx(min(expected, SHUTDOWN_TIMEOUT_S))
    slow = REFERENCE.model_copy(update={"gate": REFERENCE.gate.model_copy(
        update={"slo": slo.model_copy(update={"tpot_ms": 10_000})})})
    assert update_plan.drain_s(slow) == SHUTDOWN_TIMEOUT_S  # min, not max
    no_slo = REFERENCE.model_copy(update={"gate": REFERENCE.gate.model_copy(
        update={"slo": slo.model_copy(update={"tpot_ms": None})})})
    assert update_plan.drain_s(no_slo) == SHUTDOWN_TIMEOUT_S


def _objects(bp):
    return render_stack(bp, "green", bp.staging.local_path)


def test_the_reference_fleet_has_no_room_for_a_second_colour_so_auto_recreates():
    short = update_plan.own_fleet_shortfalls(REFERENCE, _objects(REFERENCE), 8)
    assert len(short) == 2 and all("room for 0" in s for s in short)
    assert update_plan.auto_on_own_fleet(REFERENCE, _objects(REFERENCE), 8).strategy == "recreate"


def test_a_fleet_whose_pods_take_half_a_node_has_room_and_auto_takes_blue_green():
    # Placing the live colour fullest-fit leaves half of every node free for the candidate.
    assert update_plan.own_fleet_shortfalls(REFERENCE, _objects(REFERENCE), 16) == []
    assert update_plan.auto_on_own_fleet(REFERENCE, _objects(REFERENCE), 16).strategy == "blue-green"


def test_without_downtime_allowed_auto_takes_a_second_fleet_and_the_plan_shows_its_extra_hours():
    bp = REFERENCE.model_copy(update={"promotion": REFERENCE.promotion.model_copy(update={"allow_downtime": False})})
    assert update_plan.auto_on_own_fleet(bp, _objects(bp), 8).strategy == "fleet"
    plan = make_plan(bp)
    assert plan.updates["strategy"] == "fleet" and "a second fleet" in plan.updates["reason"]
    assert plan.updates["fleet_overlap"]["expected_h"] > 0
    assert not any("cannot update this fleet" in w for w in plan.warnings)


def test_without_downtime_and_with_capacity_blocks_the_plan_warns_that_nothing_can_update_the_fleet():
    bp = REFERENCE.model_copy(update={
        "promotion": REFERENCE.promotion.model_copy(update={"allow_downtime": False}),
        "aws": REFERENCE.aws.model_copy(update={"capacity": REFERENCE.aws.capacity.model_copy(
            update={"mode": "capacity-block", "duration_hours": 24})})})
    with pytest.raises(StrategyRefused, match="cannot be cancelled"):
        update_plan.auto_on_own_fleet(bp, _objects(bp), 8)
    assert any("promotion.strategy auto cannot update this fleet" in w for w in make_plan(bp).warnings)


def test_the_plan_warns_when_the_blueprints_strategy_cannot_update_its_fleet():
    bp = REFERENCE.model_copy(update={"promotion": REFERENCE.promotion.model_copy(update={"strategy": "blue-green"})})
    plan = make_plan(bp)
    assert any("promotion.strategy blue-green cannot update this fleet" in w for w in plan.warnings)
    assert not any("cannot update this fleet" in w for w in make_plan(REFERENCE).warnings)
    assert make_plan(REFERENCE).updates["strategy"] == "recreate"


def test_an_unrelated_variant_keeps_the_estimate_shape():
    assert set(_estimate(variant(engine={"block_size": 128})).phases_s) == {"drain", "bring_up", "benchmark", "switch"}


def test_the_worst_downtime_counts_an_inconclusives_approval_wait_only_when_the_gate_asks():
    def undecided(choice):
        return REFERENCE.model_copy(update={"gate": REFERENCE.gate.model_copy(update={"undecided": choice})})

    rolls_back, asks = _estimate(undecided("rollback")), _estimate(undecided("ask"))
    assert asks.expected_s == rolls_back.expected_s
    assert asks.worst_s - rolls_back.worst_s == pytest.approx(REFERENCE.promotion.approval_timeout_s)
    assert "approval wait (gate.undecided: ask)" in asks.basis and "approval" not in rolls_back.basis
