"""A fleet update's books (``tasks.planning.fleet_swap``): the second fleet's run id, what a re-run
does after a cut-off swap, which run holds the fleet after one, and the extra fleet-hours."""

from __future__ import annotations

import datetime as dt

import pytest

from blueprints.loader import load_blueprint
from tasks.planning import fleet_swap, update_plan
from tasks.planning.ledger import Ledger, LedgerEntry
from tasks.planning.manifests import render_checked
from tasks.planning.manifests.common import RUN_LABEL
from tasks.planning.plan import make_plan
from tasks.planning.records import Handover

T0 = dt.datetime(2026, 12, 4, 10, 0, tzinfo=dt.timezone.utc)


def _at(minutes: float) -> str:
    return (T0 + dt.timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_the_second_fleet_takes_the_next_linked_run_id():
    assert fleet_swap.successor_run_id("r0123456789") == "r0123456789-f1"
    assert fleet_swap.successor_run_id("r0123456789-f1") == "r0123456789-f2"
    assert fleet_swap.successor_run_id("r0123456789-f9") == "r0123456789-f10"
    assert fleet_swap.successor_run_id("takeover-f00d12") == "takeover-f00d12-f1"  # '-f' not at the end


@pytest.mark.parametrize("phase, production, torn, step", [
    (None, "blue", False, "none"),
    ("released", "green", False, "none"),
    ("abandoned", "blue", False, "none"),
    ("abandoning", "blue", False, "abandon"),   # cut off while releasing the second fleet: finish that
    ("building", "blue", False, "build"),       # cut off before the switch: go on with the same second fleet
    ("building", None, False, "build"),
    ("building", "blue", True, "none"),         # ... unless someone tore that fleet down meanwhile
    ("building", "green", False, "settle"),     # switched, crashed before recording it
    ("building", "green", True, "none"),        # torn down by hand; another strategy moved production since
    ("switched", "green", False, "settle"),
    ("switched", "blue", False, "settle"),      # switched back by hand: settle decides which fleet goes
])
def test_a_rerun_goes_on_building_settles_or_finishes_an_abandon_by_where_the_swap_stood(phase, production, torn,
                                                                                         step):
    handover = Handover("r1-f1", "green", "blue", phase) if phase else None
    assert fleet_swap.next_step(handover, production, torn) == step


@pytest.mark.parametrize("production, previous_answers, action", [
    ("green", True, "release"),   # on the candidate: the first fleet goes
    ("green", False, "release"),
    ("blue", True, "abandon"),    # switched back to the previous colour in the keep window: the second goes
    ("blue", False, "stop"),      # ... unless that colour's engines are gone: the candidate is all there is
    (None, True, "stop"),         # production cannot be read, or routes nowhere: nothing is released
])
def test_after_the_switch_the_fleet_production_does_not_use_is_the_one_released(production, previous_answers,
                                                                                 action):
    handover = Handover("r1-f1", "green", "blue", "switched")
    assert fleet_swap.settle_action(handover, production, previous_answers) == action


def test_the_fleets_that_replaced_a_run_descend_from_it_and_a_teardown_of_it_follows_them():
    assert fleet_swap.descends_from("r1-f1", "r1") and fleet_swap.descends_from("r1-f7", "r1-f2")
    assert fleet_swap.descends_from("r1", "r1") and fleet_swap.descends_from("r1-f2", "r1-f2")
    assert not fleet_swap.descends_from("r1", "r1-f1")        # the fleet it replaced is no descendant
    assert not fleet_swap.descends_from("r12-f1", "r1") and not fleet_swap.descends_from("r2-f1", "r1-f1")
    chain = {"r1": Handover("r1-f1", "green", "blue", "released"),
             "r1-f1": Handover("r1-f2", "blue", "green", "building")}
    assert fleet_swap.successors("r1", chain.get) == ["r1-f1", "r1-f2"]
    assert fleet_swap.successors("r1-f1", chain.get) == ["r1-f2"]
    assert fleet_swap.successors("r1-f2", chain.get) == []
    loop = {"a": Handover("b", "green", "blue", "released"), "b": Handover("a", "blue", "green", "released")}
    assert fleet_swap.successors("a", loop.get) == ["b"]


def test_an_update_of_a_handed_over_fleet_goes_to_the_run_that_holds_it_now():
    ledgers = {"r1": Handover("r1-f1", "green", "blue", "released"),
               "r1-f1": Handover("r1-f2", "blue", "green", "released"),
               "r1-f2": Handover("r1-f3", "green", "blue", "building"),  # not switched: r1-f2 holds it
               "r9": Handover("r9-f1", "green", "blue", "abandoned")}
    assert fleet_swap.current_run_id("r1", ledgers.get) == "r1-f2"
    assert fleet_swap.current_run_id("r1-f1", ledgers.get) == "r1-f2"
    assert fleet_swap.current_run_id("r9", ledgers.get) == "r9"
    assert fleet_swap.current_run_id("new", ledgers.get) == "new"
    cycle = {"a": Handover("b", "green", "blue", "released"), "b": Handover("a", "blue", "green", "released")}
    with pytest.raises(ValueError, match="cycle"):
        fleet_swap.current_run_id("a", cycle.get)


def _ledger(run_id: str, *entries: LedgerEntry) -> Ledger:
    return Ledger("d", run_id, _at(0), tuple(entries))


def test_the_extra_fleet_hours_are_the_first_fleets_billing_after_the_second_began():
    first = _ledger("r1",
                    LedgerEntry("capacity-reservation", "cr-1", "reserve", usd_per_hour=252.0, started_at=_at(-600),
                                ended_at=_at(90)),
                    LedgerEntry("instance", "i-1", "launch", usd_per_hour=0.0, started_at=_at(-590), ended_at=_at(88)),
                    LedgerEntry("client-token", "launch#1", "launch", started_at=_at(-5), ended_at=_at(-5)))
    second = _ledger("r1-f1",
                     LedgerEntry("placement-group", "pg", "reserve", started_at=_at(0)),  # bills nothing
                     LedgerEntry("capacity-reservation", "cr-2", "reserve", usd_per_hour=252.0, started_at=_at(30)))
    x = fleet_swap.overlap(first, second, T0 + dt.timedelta(hours=5))
    # from the second reservation (T+30 min) to the first one's end (T+90 min): 1 h at $252/h
    assert x.hours == pytest.approx(1.0) and x.usd == pytest.approx(252.0)
    # a first fleet still billing counts up to now; a second that never billed adds nothing
    running = _ledger("r1", LedgerEntry("capacity-reservation", "cr-1", "reserve", usd_per_hour=100.0,
                                        started_at=_at(-60)))
    assert fleet_swap.overlap(running, second, T0 + dt.timedelta(minutes=150)).usd == pytest.approx(200.0)
    assert fleet_swap.overlap(first, _ledger("r1-f1"), T0) == fleet_swap.Overlap(0.0, 0.0)
    # a first fleet released before the second began overlaps by nothing (never negative)
    early = _ledger("r1", LedgerEntry("capacity-reservation", "cr-1", "reserve", usd_per_hour=252.0,
                                      started_at=_at(-60), ended_at=_at(10)))
    assert fleet_swap.overlap(early, second, T0 + dt.timedelta(hours=1)) == fleet_swap.Overlap(0.0, 0.0)


def test_the_candidate_is_pinned_to_the_second_fleets_nodes_without_changing_its_revision():
    from tasks.planning.manifests.common import pin_to_fleet

    objects = render_checked(load_blueprint("blueprints/sandbox-2p2d.yaml"), "green", "/mnt/weights")
    pinned = pin_to_fleet(objects, "r1-f1")
    lws = [o for o in pinned if o["kind"] == "LeaderWorkerSet"]
    assert len(lws) == 2
    for obj in lws:
        for key in ("leaderTemplate", "workerTemplate"):
            selector = obj["spec"]["leaderWorkerTemplate"][key]["spec"]["nodeSelector"]
            assert selector[RUN_LABEL] == "r1-f1" and selector["pdlift.io/role"] == obj["metadata"]["name"]
    assert [o["metadata"]["labels"] for o in pinned] == [o["metadata"]["labels"] for o in objects]
    assert all(RUN_LABEL not in str(o) for o in objects)  # the input is left as it was
    # The routers run on the second fleet or on nodes pdlift did not launch (no pdlift.io/role),
    # never on the first fleet, so none dies with it.
    routers = [o for o in pinned if o["kind"] == "Deployment"]
    assert routers
    for router in routers:
        affinity = router["spec"]["template"]["spec"]["affinity"]
        assert affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
            {"matchExpressions": [{"key": RUN_LABEL, "operator": "In", "values": ["r1-f1"]}]},
            {"matchExpressions": [{"key": "pdlift.io/role", "operator": "DoesNotExist"}]}]
        assert "podAntiAffinity" in affinity  # the spread across nodes is kept


def test_a_paired_gate_measures_both_colours_at_once_so_the_second_fleet_bills_one_benchmark_less():
    paired = load_blueprint("blueprints/glm51-fp8-2p2d.yaml")
    assert paired.gate.paired is not None
    unpaired = paired.model_copy(update={"gate": paired.gate.model_copy(update={"paired": None})})
    x, y = (update_plan.fleet_overlap(bp, make_plan(bp).timeline) for bp in (paired, unpaired))
    assert "baseline" not in x.phases_s and y.phases_s["baseline"] == y.phases_s["benchmark"]
    assert x.phases_s["benchmark"] == y.phases_s["benchmark"] == pytest.approx(44.5 * 60, abs=0.1)
    assert y.expected_h - x.expected_h == pytest.approx(44.5 / 60, abs=0.01)
    assert y.worst_h - x.worst_h == pytest.approx(44.5 / 60, abs=0.01)


def test_the_plan_counts_the_second_fleets_stages_both_benchmarks_and_the_keep_window_as_extra_hours():
    bp = load_blueprint("blueprints/glm51-fp8-2p2d.yaml")
    bp = bp.model_copy(update={"gate": bp.gate.model_copy(update={"paired": None})})   # measured one after the other
    timeline = make_plan(bp).timeline
    x = update_plan.fleet_overlap(bp, timeline)
    bench = timeline.of("benchmark").expected_s
    assert x.phases_s["baseline"] == x.phases_s["benchmark"] == pytest.approx(bench, abs=0.1)
    assert x.phases_s["keep"] == bp.promotion.keep_previous_colour_s == 900
    for stage in ("reserve", "launch", "fabric", "weights", "deploy"):
        assert x.phases_s[stage] == pytest.approx(timeline.of(stage).expected_s, abs=0.1)
    assert x.expected_h == pytest.approx(sum(x.phases_s.values()) / 3600, abs=0.01)
    assert x.expected_usd == pytest.approx(x.expected_h * timeline.usd_per_hour, rel=0.01)
    stages = ("reserve", "launch", "fabric", "weights", "deploy")
    rest = update_plan.SWITCH_WORST_S + 900 + 120 + update_plan.RELEASE_S
    for choice in ("rollback", "ask"):
        undecided = bp.model_copy(update={"gate": bp.gate.model_copy(update={"undecided": choice})})
        timeline = make_plan(undecided).timeline
        bench = timeline.of("benchmark")
        # both benchmarks at most to their caps; with ask, one approval wait too: the candidate's
        worst = sum(timeline.of(s).worst_s for s in stages) + 2 * bench.worst_s + rest
        if choice == "ask":
            assert bench.worst_s - bench.expected_s == bp.promotion.approval_timeout_s
            worst -= bp.promotion.approval_timeout_s
        else:
            assert bench.worst_s == bench.expected_s
        worst_h = update_plan.fleet_overlap(undecided, timeline).worst_h
        assert worst_h == pytest.approx(worst / 3600, abs=0.01), choice
    assert "fleet: no downtime; a second fleet bills beside the first" in update_plan.describe_fleet(x)


def test_a_second_fleet_counts_as_torn_down_only_once_its_teardown_left_nothing_billing():
    from tasks.planning.records import TornDown

    billing = LedgerEntry("capacity-reservation", "cr-2", "reserve", usd_per_hour=252.0, started_at=_at(0))
    ended = LedgerEntry("capacity-reservation", "cr-2", "reserve", usd_per_hour=252.0, started_at=_at(0),
                        ended_at=_at(30))
    assert not fleet_swap.torn_down(None)
    assert not fleet_swap.torn_down(_ledger("r1-f1", billing))
    assert fleet_swap.torn_down(_ledger("r1-f1", ended).with_record(TornDown(1)))
    assert not fleet_swap.torn_down(_ledger("r1-f1", billing).with_record(TornDown(0)))  # still billing
