"""`pdlift status`'s view, composed from ledgers, leases and what EC2 and Kubernetes answered."""

import datetime as dt

import pytest

from tasks.planning import status as view
from tasks.planning.lease import Lease
from tasks.planning.ledger import Ledger, LedgerEntry
from tasks.planning.records import Deployed, Fleet, GateResult, GateVerdict, Node, Promotion, Reserved

T0 = dt.datetime(2026, 12, 4, 10, 0, tzinfo=dt.timezone.utc)
BP = "blueprints/x.yaml"


def _ledger(run_id="r1", promoted="blue", answered_at=T0.timestamp(), instances=("i-1", "i-2")) -> Ledger:
    ledger = Ledger("d", run_id, "2026-12-04T09:00:00Z")
    ledger = ledger.with_entry(LedgerEntry("capacity-reservation", f"cr-{run_id}", "reserve", "az1", 100.0, 0,
                                           "2026-12-04T09:00:00Z"))
    for i in instances:
        ledger = ledger.with_entry(LedgerEntry("instance", i, "launch", "az1", 0.0, 0, "2026-12-04T09:00:00Z"))
    ledger = ledger.with_record(Reserved(f"cr-{run_id}", "az1", "pg", False, (), False))
    ledger = ledger.with_record(Fleet(tuple(Node(i, "10.0.0.1", "prefill", node_name=f"n-{i}") for i in instances),
                                      "lt-1", 1, ()))
    ledger = ledger.with_record(Deployed("d", promoted, None, "ns", "ns", "svc", {}, 1.0, "ok"))
    if promoted:
        ledger = ledger.with_record(GateResult("promoted", "PASS", GateVerdict("PASS", (), "", "", ""),
                                               Promotion(promoted, None, (), answered_at=answered_at)))
    return ledger


def _lease(run_id="r1", expires=T0 + dt.timedelta(seconds=1)) -> Lease:
    return Lease("d", run_id, "fr-1", "host:1", expires.strftime("%Y-%m-%dT%H:%M:%SZ"), "2026-12-04T09:59:00Z")


def _compose(ledgers, leases=(), engines=view.LiveEngines("blue", (("img:1", "img@sha256:ab"),), 2, 2),
             tagged=(), gates=(), ui="http://127.0.0.1:4200", kube_answered=True):
    return view.compose("d", BP, "/state", T0, list(ledgers), list(leases),
                        {"cr-r1": view.Reservation("cr-r1", "active", "2026-12-05T10:00:00Z")}, engines,
                        list(gates), ui, None if tagged is None else list(tagged), kube_answered=kube_answered)


def test_an_empty_account_and_store_say_nothing_runs_and_nothing_is_tagged():
    s = _compose([], engines=None)
    assert s.empty and s.fleets == () and s.usd_per_hour == 0.0 and s.releases == ()
    assert "nothing tagged for it" in view.render_text(s)
    assert view.to_dict(s)["empty"] is True


def test_an_unanswered_ec2_or_kubernetes_is_not_taken_for_an_empty_account():
    s = _compose([], engines=None, tagged=None)
    assert s.releases is None and not s.empty
    assert "nothing tagged" not in view.render_text(s)
    s = _compose([], engines=None, kube_answered=False)
    assert not s.empty and "live colour: unknown (Kubernetes did not answer)" in view.render_text(s)


def test_a_tagged_resource_in_no_ledger_is_shown_as_untracked_and_keeps_the_screen_from_saying_empty():
    s = _compose([], engines=None, tagged=[view.Tagged("capacity-reservation", "cr-leak", "r0")])
    assert not s.empty
    assert s.untracked == ("capacity-reservation cr-leak (run r0)",)
    text = view.render_text(s)
    assert "untracked" in text and "cr-leak" in text
    assert "billing now: $0.00/h + 1 untracked resource(s) not priced" in text  # never a bare $0.00/h


def test_a_capacity_block_is_listed_as_kept_by_a_teardown_not_released():
    s = _compose([], engines=None, tagged=[view.Tagged("capacity-block", "cr-blk", "r0"),
                                           view.Tagged("instance", "i-9", "r0")])
    assert s.releases == ("capacity-block cr-blk (run r0): kept, a Capacity Block cannot be cancelled; it bills "
                          "until it ends", "instance i-9 (run r0)")


def test_the_fleet_its_reservation_and_the_billing_come_from_the_ledger_and_ec2():
    s = _compose([_ledger()], tagged=[view.Tagged("capacity-reservation", "cr-r1", "r1")])
    (fleet,) = s.fleets
    assert (fleet.run_id, fleet.zone, fleet.reservation_id, fleet.reservation_state) == ("r1", "az1", "cr-r1", "active")
    assert fleet.reservation_ends_at == "2026-12-05T10:00:00Z"
    assert len(fleet.nodes) == 2 and fleet.nodes[0].startswith("n-i-1 i-1 prefill")
    assert s.usd_per_hour == 100.0 and s.spend_usd == pytest.approx(100.0)  # one hour at $100/h
    assert fleet.teardown == "pdlift teardown blueprints/x.yaml --run-id r1"
    assert s.untracked == () and s.teardown == "pdlift teardown blueprints/x.yaml"


def test_a_terminated_instance_is_not_a_node_of_the_fleet_and_an_ended_run_is_no_fleet_but_still_cost():
    ledger = _ledger().ended("instance", "i-2", T0)
    (fleet,) = _compose([ledger]).fleets
    assert [n.split()[1] for n in fleet.nodes] == ["i-1"]
    cut_off = ledger.with_entry(LedgerEntry("instance", "i-3", "launch", "az1", 0.0, 0, "2026-12-04T09:00:00Z"))
    (fleet,) = _compose([cut_off]).fleets  # launched, never in a fleet record: it bills, so it is shown
    assert fleet.nodes == ("n-i-1 i-1 prefill", "(not joined) i-3 -")
    gone = _ledger("r0").ended("capacity-reservation", "cr-r0", T0).ended("instance", "i-1", T0).ended(
        "instance", "i-2", T0)
    s = _compose([gone])
    assert s.fleets == () and s.usd_per_hour == 0.0 and s.spend_usd == pytest.approx(100.0)


def test_the_promotion_shown_is_the_latest_run_that_promoted_the_live_colour():
    older, newer = _ledger("r0", "green", 1.0), _ledger("r1", "blue", T0.timestamp())
    s = _compose([older, newer])
    assert (s.promoted_by_run, s.promoted_at) == ("r1", "2026-12-04T10:00:00Z")
    s = _compose([older, newer], engines=view.LiveEngines("green"))
    assert (s.promoted_by_run, s.promoted_at) == ("r0", "1970-01-01T00:00:01Z")
    assert _compose([older], engines=view.LiveEngines(None)).promoted_by_run == ""


def test_a_lease_counts_as_in_flight_until_it_expires_and_names_the_next_stage():
    ledger = Ledger("d", "r2", "2026-12-04T09:00:00Z").with_record(Reserved("cr-9", "az1", None, False, (), False))
    (flying,) = _compose([ledger], [_lease("r2")]).in_flight
    assert (flying.run_id, flying.stage, flying.worker) == ("r2", "launch", "host:1")
    assert _compose([ledger], [_lease("r2", expires=T0)]).in_flight == ()  # expired at T0: not in flight
    assert view.stage_in_flight(_ledger()) == "fabric"
    assert view.stage_in_flight(None) == "reserve"


def test_the_last_gate_is_the_latest_verdict_and_links_to_the_flow_run_that_judged_it():
    gates = [view.GateSeen("r0", "PASS", (), "k0", "2026-12-04T09:30:00Z", "fr-0"),
             view.GateSeen("r1", "FAIL", ("ttft p90 1.3x",), "k1", "2026-12-04T09:00:00Z", "fr-1")]
    s = _compose([_ledger()], gates=gates)  # r1 is the newer run, but r0 (resumed) judged later
    assert s.gate.run_id == "r0" and s.gate_link == "http://127.0.0.1:4200/runs/flow-run/fr-0"
    s = _compose([_ledger()], gates=gates[1:])
    assert "last gate: FAIL (run r1, 2026-12-04T09:00:00Z): ttft p90 1.3x" in view.render_text(s)
    assert _compose([_ledger()], gates=gates, ui=None).gate_link == ""
    untimed = [view.GateSeen("r0", "PASS", (), "k0"), view.GateSeen("r1", "FAIL", (), "k1")]
    assert view.latest_gate(untimed).run_id == "r1"  # reports without a time: the later run's
    assert view.latest_gate(untimed + [gates[1]]).run_id == "r1" and view.latest_gate([]) is None


def test_each_image_is_shown_with_its_own_digest_on_the_screen_and_in_json():
    engines = view.LiveEngines("blue", (("img:1", "img@sha256:ab"), ("img:2", "img@sha256:cd")), 3, 4)
    s = _compose([_ledger()], engines=engines)
    text = view.render_text(s)
    assert "image img:1 (running img@sha256:ab)" in text and "image img:2 (running img@sha256:cd)" in text
    assert "3/4 engine pods ready" in text
    d = view.to_dict(s)
    assert d["images"] == [["img:1", "img@sha256:ab"], ["img:2", "img@sha256:cd"]] and d["live_colour"] == "blue"
    assert "**blue**" in view.render_markdown(s)


def test_the_teardown_command_quotes_a_path_with_spaces():
    assert view.teardown_command("my bps/x.yaml", "r 1") == "pdlift teardown 'my bps/x.yaml' --run-id 'r 1'"
