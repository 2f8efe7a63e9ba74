"""The run ledger: resources recorded once, costs per stage, what still bills."""

import datetime as dt

import pytest

from tasks.planning.ledger import Ledger, LedgerEntry, hourly_burn, render_markdown, spend_by_stage
from tasks.planning.records import Reserved
from tasks.stages.teardown import Found, stale

T0 = dt.datetime(2026, 11, 29, 10, 0, tzinfo=dt.timezone.utc)


def test_an_odcr_accrues_its_hourly_rate_until_it_ends():
    ledger = Ledger("d", "r1", "2026-11-29T10:00:00Z").with_entry(
        LedgerEntry("capacity-reservation", "cr-1", "reserve", "us-east-2a", 253.184, 0, "2026-11-29T10:00:00Z"))
    assert spend_by_stage(ledger, T0 + dt.timedelta(hours=2)) == {"reserve": pytest.approx(506.37, abs=0.01)}
    assert hourly_burn(ledger) == pytest.approx(253.18)
    ended = ledger.ended("capacity-reservation", "cr-1", T0 + dt.timedelta(minutes=30))
    assert spend_by_stage(ended, T0 + dt.timedelta(hours=5)) == {"reserve": pytest.approx(126.59, abs=0.01)}
    assert hourly_burn(ended) == 0


def test_recording_the_same_resource_twice_keeps_one_entry():
    e = LedgerEntry("instance", "i-1", "launch")
    ledger = Ledger("d", "r", "2026-11-29T10:00:00Z").with_entry(e).with_entry(e)
    assert len(ledger.entries) == 1


def test_ledger_round_trips_through_json_and_renders_a_table():
    ledger = Ledger("d", "r", "2026-11-29T10:00:00Z").with_entry(
        LedgerEntry("capacity-block", "cr-9", "reserve", upfront_usd=1000.0)).with_record(
        Reserved("cr-9", "us-east-2a", None, True, (), False))
    again = Ledger.from_dict(ledger.to_dict())
    assert again == ledger
    text = render_markdown(again, T0)
    assert "| cr-9 | capacity-block | reserve |" in text and "Still billing: $0.00/h" in text


def test_sweep_takes_what_is_past_ttl_or_of_no_active_run():
    now = T0 + dt.timedelta(hours=10)
    old = Found("instance", "i-old", "d", "r-active", "2026-11-29T00:00:00Z", 4)
    fresh_active = Found("instance", "i-new", "d", "r-active", "2026-11-29T18:00:00Z", 4)
    crashed = Found("capacity-reservation", "cr-x", "d", "r-crashed", "2026-11-29T18:00:00Z", 4)
    assert stale([old, fresh_active, crashed], now, {"r-active"}) == [old, crashed]


def test_the_sweep_keeps_the_fleets_that_replaced_an_active_run_and_not_the_one_an_active_run_replaced():
    now = T0 + dt.timedelta(hours=10)
    created = "2026-11-29T18:00:00Z"
    second = Found("instance", "i-second", "d", "r-active-f1", created, 4)     # production moved here
    third = Found("capacity-reservation", "cr-3", "d", "r-active-f2", created, 4)
    older = Found("instance", "i-older", "d", "r-older", created, 4)
    assert stale([second, third, older], now, {"r-active"}) == [older]
    first = Found("instance", "i-first", "d", "r-active", created, 4)  # the fleet an active -f1 replaced
    assert stale([first, second], now, {"r-active-f1"}) == [first]
    lookalike = Found("instance", "i-x", "d", "r-active2-f1", created, 4)
    assert stale([lookalike], now, {"r-active"}) == [lookalike]
