"""`pdlift plan`'s timeline: every stage's expected and worst time for both blueprints, checked
against hand computations, its cost at the fleet's price, and the warnings it raises."""

from __future__ import annotations

from pathlib import Path

import pytest

from blueprints.loader import load_blueprint
from tasks.planning.plan import make_plan
from tasks.planning.plan_render import render
from tasks.planning.timeline import beside_actual, duration, project

REPO = Path(__file__).resolve().parents[2]
GIB = 1 << 30
SWEEP = (1 + 2 + 4 + 8 + 16) * GIB      # nccl-tests from the 1 GiB judging size to 16 GiB, doubling
PASSES = 47                             # 5 warm-up + 20 out of place + 20 in place + 2 checks


@pytest.fixture(scope="module")
def glm():
    return load_blueprint(REPO / "blueprints" / "glm51-fp8-2p2d.yaml")


@pytest.fixture(scope="module")
def sandbox():
    return load_blueprint(REPO / "blueprints" / "sandbox-2p2d.yaml")


def undecided(bp, choice: str):
    """``bp`` with ``gate.undecided: choice`` (ask: an INCONCLUSIVE gate waits for a person)."""
    return bp.model_copy(update={"gate": bp.gate.model_copy(update={"undecided": choice})})


def asking(bp):
    return undecided(bp, "ask")


def by_stage(timeline):
    return {s.stage: (s.expected_s, s.worst_s) for s in timeline.stages}


def sweep_s(algbw_gbs):
    return PASSES * SWEEP / (algbw_gbs * 1e9)


def test_the_reference_timeline_by_hand(glm):
    t = make_plan(glm).timeline
    stages = by_stage(t)
    assert [s.stage for s in t.stages] == ["reserve", "launch", "fabric", "weights", "deploy", "benchmark"]
    assert stages["reserve"] == (60, 60 + 300)                        # API calls; pending ~5 min (< wait_ready_s 900)
    assert stages["launch"] == (600, 900)                             # assumed boot+join; join_timeout_s
    # Fabric, 4 nodes of 8 GPUs: inventory and loopbacks 2 x 20 s; single node all_reduce at 431 GB/s busbw
    # (algbw = busbw / (2 x 7/8)); 3 round-robin rounds of a pair (16 ranks): fi_pingpong 20 s, three
    # tests' 30 s start-up, all_reduce 300 / (2 x 15/16), alltoall 60 / (15/16), sendrecv 40; the whole
    # set (32 ranks): all_reduce 300 / (2 x 31/32), alltoall 60 / (31/32).
    single = 30 + sweep_s(431 / 1.75)
    pair = 20 + 90 + sweep_s(300 / 1.875) + sweep_s(60 / 0.9375) + sweep_s(40)
    whole = 60 + sweep_s(300 / 1.9375) + sweep_s(60 / 0.96875)
    assert stages["fabric"][0] == pytest.approx(40 + single + 3 * pair + whole)
    assert stages["fabric"][0] == pytest.approx(721.7, abs=0.1)
    # At most, per node (4 nodes, 32 at a time): the inventory's 3 commands to 120 s, the negative
    # control and 16 NICs 8 at a time, 3 waves to their 2 x 600 + 15 s bound; then 1 + 4 x 3 + 2
    # tests to the 600 s watchdog; and 2 replacements (a join, the new node's inventory and
    # loopbacks, 1 + 4 x 3 tests each).
    per_node = 3 * 120 + 3 * 1215
    assert stages["fabric"][1] == pytest.approx(per_node + 15 * 600 + 2 * (900 + per_node + 13 * 600))
    assert stages["weights"] == pytest.approx((754 / 4.3, 754 / 1.0))
    assert stages["deploy"] == (600, 2700)
    # The paired design's three points, one run each (the migration without baseline.endpoint runs
    # them against the published figures): 1,110 + 540 + 1,020 s, within the 45 min budget; an
    # INCONCLUSIVE rolls back at once (gate.undecided: rollback), so at most is the same.
    assert stages["benchmark"] == pytest.approx((2670, 2670))
    assert "3 points x 1 repeats at full length, within benchmark.budget_minutes = 45" in t.of("benchmark").basis
    assert t.expected_s == pytest.approx(60 + 600 + 721.7 + 754 / 4.3 + 600 + 2670, abs=0.1)
    assert t.usd_per_hour == pytest.approx(4 * 63.296)


def test_the_sandbox_blueprints_timeline_by_hand(sandbox):
    stages = by_stage(make_plan(sandbox).timeline)
    assert stages["launch"] == (600, 600)                              # join_timeout_s 60 < the assumed 600
    # test_timeout_s 30; 16 NICs 2 at a time: the control and 8 waves to 2 x 30 + 15 s
    per_node = 3 * 120 + 9 * 75
    assert stages["fabric"][1] == pytest.approx(per_node + 15 * 30 + 2 * (60 + per_node + 13 * 30))
    assert stages["benchmark"] == (10 + 10 + 15 + 15, 50)              # 1 repeat of 4 points, no approval wait


@pytest.mark.parametrize("per_node, waves", [(10, 3), (7, 4), (5, 5), (4, 5), (3, 7), (1, 17)])
def test_the_fabric_worst_case_counts_a_loopback_wave_per_started_batch_of_nics(glm, per_node, waves):
    fabric = glm.fabric.model_copy(update={"loopbacks_per_node": per_node})
    worst = make_plan(glm.model_copy(update={"fabric": fabric})).timeline.of("fabric").worst_s
    base = make_plan(glm.model_copy(update={"fabric": glm.fabric.model_copy(update={"loopbacks_per_node": 8})}))
    # 3 waves at 8 per node; every other wave adds its bound once for the fleet and once per replacement.
    assert worst - base.timeline.of("fabric").worst_s == pytest.approx((waves - 3) * 1215 * (1 + 2))


@pytest.mark.parametrize("parallel, batches", [(32, 1), (4, 1), (3, 2), (2, 2), (1, 4)])
def test_the_per_node_fabric_layers_run_aws_ssh_max_parallel_nodes_at_a_time(glm, parallel, batches):
    ssh = glm.aws.ssh.model_copy(update={"max_parallel": parallel})
    worst = make_plan(glm.model_copy(update={"aws": glm.aws.model_copy(update={"ssh": ssh})})).timeline.of("fabric")
    per_node = 3 * 120 + 3 * 1215  # 4 nodes; each batch also runs its single-node test to 600 s
    assert worst.worst_s - make_plan(glm).timeline.of("fabric").worst_s == pytest.approx((batches - 1) * (per_node + 600))


def test_a_fixed_benchmark_is_its_repeats_and_a_budget_cuts_either(glm):
    from blueprints.schema import SequentialSpec

    fixed = glm.benchmark.model_copy(update={"repeats": 3, "budget_minutes": None})
    load = 3 * (1110 + 540 + 1020)                                     # 3 repeats of 3 points: 133.5 min
    assert by_stage(make_plan(glm.model_copy(update={"benchmark": fixed})).timeline)["benchmark"] == \
        pytest.approx((load, load))
    budget = glm.model_copy(update={"benchmark": fixed.model_copy(update={"budget_minutes": 60})})
    assert by_stage(make_plan(budget).timeline)["benchmark"] == pytest.approx((3600, 3600))
    # Sequential: planned to the caps within the budget; as early as every point's round 2 of 6.
    rounds = glm.benchmark.model_copy(update={"sequential": SequentialSpec(rounds=6), "budget_minutes": 40})
    tight = glm.model_copy(update={"benchmark": rounds})
    assert by_stage(make_plan(tight).timeline)["benchmark"] == pytest.approx((2400, 2400))
    assert "as early as 15 min" in make_plan(tight).timeline.of("benchmark").basis      # 2670 x 2 / 6 s


def test_the_cost_of_each_stage_is_its_time_at_the_fleets_price(glm):
    t = make_plan(glm).timeline
    expected, worst = t.of("benchmark").usd(t.usd_per_hour)
    assert expected == pytest.approx(2670 / 3600 * 4 * 63.296) and worst == pytest.approx(2670 / 3600 * 4 * 63.296)
    assert t.of("weights").usd(None) == (None, None)
    plan = make_plan(glm)
    assert plan.cost.usd_per_run == pytest.approx(t.expected_s / 3600 * 4 * 63.296, abs=0.01)


def test_the_plan_warns_when_the_run_outlasts_its_capacity_or_its_stated_target(glm):
    assert make_plan(glm).timeline.warnings == ()                     # 1.3 h expected, 12.6 h at most, 48 h held
    short = glm.model_copy(update={"expected_run_hours": 1.0})
    assert any("expected_run_hours = 1" in w for w in make_plan(short).warnings)
    exact = glm.model_copy(update={"expected_run_hours": make_plan(glm).timeline.expected_s / 3600})
    assert not any("expected_run_hours" in w for w in make_plan(exact).warnings)   # equal is not more
    cap = glm.aws.capacity.model_copy(update={"mode": "capacity-block", "duration_hours": 13, "max_upfront_usd": 5000})
    block = glm.model_copy(update={"aws": glm.aws.model_copy(update={"capacity": cap})})
    (warning,) = [w for w in make_plan(block).warnings if "Capacity Block" in w]
    assert "12.6 h at most" in warning and "30 min" in warning     # a block is bought at once: no pending wait
    roomy = glm.aws.capacity.model_copy(update={"mode": "capacity-block", "duration_hours": 14, "max_upfront_usd": 5000})
    assert not [w for w in make_plan(glm.model_copy(update={"aws": glm.aws.model_copy(update={"capacity": roomy})})
                                     ).warnings if "Capacity Block" in w]
    odcr = glm.model_copy(update={"aws": glm.aws.model_copy(update={"capacity": glm.aws.capacity.model_copy(
        update={"duration_hours": 12})})})
    assert any("duration_hours = 12" in w for w in make_plan(odcr).warnings)


@pytest.mark.parametrize("prefill, decode, rounds", [(2, 2, 3), (2, 1, 3), (3, 2, 5), (1, 1, 1)])
def test_the_pairwise_rounds_are_the_round_robins(glm, prefill, decode, rounds):
    # n nodes: n - 1 rounds when n is even, n when it is odd (one node sits each round out).
    topology = glm.topology.model_copy(update={"prefill": glm.topology.prefill.model_copy(update={"nodes": prefill}),
                                              "decode": glm.topology.decode.model_copy(update={"nodes": decode})})
    fabric = make_plan(glm.model_copy(update={"topology": topology})).timeline.of("fabric")
    assert f" {rounds} pairwise round(s)" in fabric.basis


def test_a_capacity_block_counts_the_half_hour_ec2_takes_to_shut_it_down(glm):
    # At most 17.9 h here (an INCONCLUSIVE may wait 19,000 s for a person): inside an 18 h block,
    # not inside its 17.5 usable hours.
    cap = glm.aws.capacity.model_copy(update={"mode": "capacity-block", "duration_hours": 18, "max_upfront_usd": 5000})
    bp = asking(glm).model_copy(update={"aws": glm.aws.model_copy(update={"capacity": cap}),
                                        "promotion": glm.promotion.model_copy(update={"approval_timeout_s": 19000})})
    worst = make_plan(bp).timeline.worst_s
    assert 18 * 3600 - 1800 < worst <= 18 * 3600
    assert any("Capacity Block" in w for w in make_plan(bp).warnings)


def test_the_plan_prints_the_timeline_with_its_sources_and_json_carries_it(glm):
    plan = make_plan(glm)
    text = render(plan)
    assert "Timeline on AWS (projected)" in text and "benchmark  44 min    44 min" in text
    assert "s5cmd#636" in text and "assumed: no published p5en figure" in text
    assert "projected run 1.34 h" in text and "expected run 6 h" not in text
    doc = plan.to_dict()
    assert [s["stage"] for s in doc["timeline"]["stages"]] == ["reserve", "launch", "fabric", "weights", "deploy",
                                                               "benchmark"]
    assert doc["timeline"]["expected_s"] == pytest.approx(plan.timeline.expected_s)


def test_an_inconclusives_approval_wait_is_planned_only_when_the_gate_asks_a_person(glm, sandbox):
    # gate.undecided: rollback (the default) rolls an INCONCLUSIVE back at once: no wait to plan.
    for bp in (glm, sandbox):
        rolls_back, asks = make_plan(undecided(bp, "rollback")).timeline, make_plan(asking(bp)).timeline
        assert rolls_back.of("benchmark").expected_s == asks.of("benchmark").expected_s
        assert asks.of("benchmark").worst_s - rolls_back.of("benchmark").worst_s == bp.promotion.approval_timeout_s
        assert asks.worst_s - rolls_back.worst_s == bp.promotion.approval_timeout_s
        assert "rolls back at once (gate.undecided: rollback)" in rolls_back.of("benchmark").basis
        assert "wait for approval" not in rolls_back.of("benchmark").basis
        assert (f"plus an INCONCLUSIVE's wait for approval ({bp.promotion.approval_timeout_s} s, gate.undecided: ask)"
                in asks.of("benchmark").basis)
    fixed = sandbox.model_copy(update={"benchmark": sandbox.benchmark.model_copy(update={"sequential": None})})
    assert "gate.undecided: ask" in make_plan(asking(fixed)).timeline.of("benchmark").basis
    assert "gate.undecided: rollback" in make_plan(undecided(fixed, "rollback")).timeline.of("benchmark").basis


def test_the_migrate_summary_shows_each_stage_beside_its_projection(glm):
    t = project(glm, 754.0, 253.0)
    lines = beside_actual(t, [{"stage": "fabric", "status": "done", "seconds": 41.2},
                              {"stage": "teardown", "status": "done", "seconds": 3.0}])
    assert lines[2] == "| fabric | done | 41.2 | 12 min | 10.7 h |"
    assert lines[3] == "| teardown | done | 3.0 | — | — |"


@pytest.mark.parametrize("seconds, text", [(89, "89 s"), (90, "2 min"), (5399, "90 min"), (5400, "1.5 h")])
def test_durations_read_as_people_say_them(seconds, text):
    assert duration(seconds) == text
