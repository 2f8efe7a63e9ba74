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


@pytest.mark.parametrize("phase, production, step", [
    (None, "blue", "none"),
    ("released", "green", "none"),
    ("abandoned", "blue", "none"),
    ("building", "blue", "build"),      # cut off before the switch: go on with the same second fleet
    ("building", None, "build"),
    ("building", "green", "release"),   # switched, crashed before recording it
    ("switched", "green", "release"),
    ("switched", "blue", "release"),    # recorded as switched: the first fleet goes whatever is read now
])
def test_a_rerun_goes_on_building_or_releases_by_where_the_swap_stood(phase, production, step):
    handover = Handover("r1-f1", "green", "blue", phase) if phase else None
    assert fleet_swap.next_step(handover, production) == step


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
    routers = [o for o in pinned if o["kind"] == "Deployment"]
    assert routers and all(RUN_LABEL not in str(o) for o in routers)  # routers run on the CPU nodes


def test_the_plan_counts_the_second_fleets_stages_both_benchmarks_and_the_keep_window_as_extra_hours():
    bp = load_blueprint("blueprints/glm51-fp8-2p2d.yaml")
    timeline = make_plan(bp).timeline
    x = update_plan.fleet_overlap(bp, timeline)
    bench = timeline.of("benchmark").expected_s
    assert x.phases_s["baseline"] == x.phases_s["benchmark"] == pytest.approx(bench, abs=0.1)
    assert x.phases_s["keep"] == bp.promotion.keep_previous_colour_s == 900
    for stage in ("reserve", "launch", "fabric", "weights", "deploy"):
        assert x.phases_s[stage] == pytest.approx(timeline.of(stage).expected_s, abs=0.1)
    assert x.expected_h == pytest.approx(sum(x.phases_s.values()) / 3600, abs=0.01)
    assert x.expected_usd == pytest.approx(x.expected_h * timeline.usd_per_hour, rel=0.01)
    assert x.worst_h > x.expected_h
    assert "fleet: no downtime; a second fleet bills beside the first" in update_plan.describe_fleet(x)
