"""Which colours the leak sweep may delete: only one nobody is left to decide on, whose run's
gate decided against it (or promoted it before production moved on), and never while a run, an
update or a keep window may still need it. Each condition is pinned at its boundary."""

import datetime as dt
from dataclasses import replace

import pytest

from tasks.planning.leftovers import ColourSeen, RunSeen, judge_candidates, parse_time

NOW = dt.datetime(2026, 12, 4, 12, 0, 0, tzinfo=dt.timezone.utc)
GREEN = {"green": ColourSeen("d-green")}
BOTH = {"blue": ColourSeen("d-blue"), "green": ColourSeen("d-green")}
TIMEOUT = 600
# green's run: deployed it, the gate was INCONCLUSIVE 700 s ago, nobody approved, its flow run ended
EXPIRED = RunSeen("r2", "fr-2", True, True, "", "green", "INCONCLUSIVE", NOW - dt.timedelta(seconds=700))


def one(runs=(EXPIRED,), present=GREEN, service=True, live="blue", now=NOW):
    found = judge_candidates("d", service, live, present, list(runs), now, TIMEOUT)
    assert len(found) == 1, found
    return found[0]


def test_an_inconclusive_gate_nobody_approved_in_time_leaves_a_leftover():
    c = one()
    assert (c.colour, c.namespace, c.leftover) == ("green", "d-green", True)
    assert c.why == ("run r2's gate was INCONCLUSIVE at 2026-12-04T11:48:20Z and nobody approved within 600 s; "
                     "production routes to blue")


@pytest.mark.parametrize("waited_s, leftover", [(599, False), (600, True), (601, True)])
def test_the_approval_timeout_is_waited_out_from_the_verdict(waited_s, leftover):
    assert one([replace(EXPIRED, judged_at=NOW - dt.timedelta(seconds=waited_s))]).leftover is leftover


def test_with_undecided_rollback_an_inconclusive_gate_is_a_decision_at_once():
    # gate.undecided: rollback waits for nobody (timeline.approval_wait_s is 0): a candidate whose
    # rollback never ran (a worker lost after the verdict) is a leftover from the verdict on.
    at_once = judge_candidates("d", True, "blue", GREEN, [replace(EXPIRED, judged_at=NOW)], NOW, 0)[0]
    assert at_once.leftover is True
    assert "(gate.undecided: rollback) and its rollback never ran" in at_once.why
    before = judge_candidates("d", True, "blue", GREEN, [replace(EXPIRED, judged_at=NOW + dt.timedelta(seconds=1))],
                              NOW, 0)[0]
    assert before.leftover is False


@pytest.mark.parametrize("verdict, promoted, leftover", [
    ("FAIL", None, True),             # a worker lost between the FAIL and its rollback
    ("PASS", None, False),            # passed, not promoted yet: a re-trigger promotes it
    ("PASS", "green", True),          # promoted once, replaced since, its retirement never finished
    ("", None, False),                # never judged: a re-trigger continues at its gate
    ("unreadable", None, False),
])
def test_only_a_gate_that_decided_against_it_or_a_finished_promotion_makes_a_leftover(verdict, promoted, leftover):
    c = one([replace(EXPIRED, verdict=verdict, judged_at=None, promoted_colour=promoted)])
    assert c.leftover is leftover
    if not leftover:
        assert "pdlift rollback BLUEPRINT green" in c.why or "re-trigger" in c.why


@pytest.mark.parametrize("ended, expired, busy_why", [
    (True, True, None),
    (True, False, None),       # a lease a killed run never gave up: Prefect's word wins
    (False, True, "its lease expired at"),  # Paused (suspended, waiting for approval), or a lost worker
    (False, False, "is in flight"),
    (None, True, "Prefect cannot say"),     # the API down, or a server that never saw the run
    (None, False, "Prefect cannot say"),
])
def test_any_run_prefect_does_not_say_has_ended_keeps_every_candidate(ended, expired, busy_why):
    other = RunSeen("r3", "fr-3", ended, expired, "2026-12-04T11:59:00Z")
    c = one([EXPIRED, other])
    assert c.leftover is (busy_why is None)
    if busy_why:
        assert busy_why in c.why and "r3" in c.why


def test_a_run_without_a_lease_never_took_a_flow_and_a_run_named_active_is_busy():
    assert one([EXPIRED, RunSeen("r0")]).leftover is True
    assert "named active" in one([replace(EXPIRED, named_active=True)]).why


def test_a_recreates_maintenance_keeps_both_colours_but_no_service_at_all_does_not():
    kept = judge_candidates("d", True, None, BOTH, [EXPIRED], NOW, TIMEOUT)
    assert [c.leftover for c in kept] == [False, False] and "maintenance" in kept[0].why
    gone = judge_candidates("d", False, None, BOTH, [EXPIRED], NOW, TIMEOUT)
    assert [(c.colour, c.leftover) for c in gone] == [("blue", False), ("green", True)]
    assert gone[1].why.endswith("there is no production Service")


def test_the_live_colour_is_never_judged():
    assert judge_candidates("d", True, "green", GREEN, [EXPIRED], NOW, TIMEOUT) == []


@pytest.mark.parametrize("until_s, leftover", [(1, False), (0, True), (-1, True)])
def test_a_switch_back_colour_is_kept_until_its_keep_window_ends(until_s, leftover):
    present = {"green": ColourSeen("d-green", NOW + dt.timedelta(seconds=until_s))}
    assert one(present=present).leftover is leftover


def test_an_unsettled_fleet_update_owns_both_colours():
    c = one([EXPIRED, RunSeen("r1", handover_open=True)])
    assert not c.leftover and "fleet update of run r1" in c.why


def test_the_newest_run_that_deployed_the_colour_owns_it_and_none_means_kept():
    older_fail = replace(EXPIRED, run_id="r1", verdict="FAIL")
    newer_undecided = replace(EXPIRED, run_id="r2", verdict="", judged_at=None)
    assert one([older_fail, newer_undecided]).leftover is False
    assert one([newer_undecided, older_fail]).leftover is True
    assert "no run deployed or judged" in one([replace(EXPIRED, deployed_colour="blue")]).why


def test_a_verdict_counts_for_the_colour_it_judged():
    judged_only = replace(EXPIRED, deployed_colour=None, judged_colour="green")  # benchmark-gate run on its own
    assert one([judged_only]).leftover is True
    assert one([replace(EXPIRED, judged_colour="blue")]).leftover is False  # its verdict was about blue


def test_times_are_read_in_the_ledgers_format_and_anything_else_is_no_time():
    assert parse_time("2026-12-04T11:48:20Z") == NOW - dt.timedelta(seconds=700)
    assert parse_time("") is None and parse_time(None) is None and parse_time("yesterday") is None
