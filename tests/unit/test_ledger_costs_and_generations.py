"""The ledger's money and bookkeeping at its edges (``tasks.planning.ledger``): what an entry costs
before, during and after its life, which entries still bill, token generations, and the table."""

from __future__ import annotations

import datetime as dt

import pytest

from tasks.planning.identity import Generation
from tasks.planning.ledger import (
    TOKEN_GENERATION, Ledger, LedgerEntry, generation_entry, generations, hourly_burn, now_str, parse_time,
    render_markdown, spend_by_stage,
)

T0 = dt.datetime(2026, 11, 29, 10, 0, tzinfo=dt.timezone.utc)
START = "2026-11-29T10:00:00Z"


def empty() -> Ledger:
    return Ledger("dep", "r1", START)


def test_an_entry_that_never_started_costs_its_upfront_fee_only():
    assert LedgerEntry("capacity-block", "cr-1", "reserve", usd_per_hour=100.0, upfront_usd=250.0).cost(T0) == 250.0


def test_a_running_entry_costs_its_fee_plus_its_rate_for_the_hours_so_far():
    e = LedgerEntry("instance", "i-1", "launch", usd_per_hour=10.0, upfront_usd=5.0, started_at=START)
    assert e.cost(T0 + dt.timedelta(minutes=90)) == pytest.approx(5.0 + 15.0)


def test_an_ended_entry_stops_costing_at_its_end():
    e = LedgerEntry("instance", "i-1", "launch", usd_per_hour=10.0, started_at=START,
                    ended_at="2026-11-29T11:00:00Z")
    assert e.cost(T0 + dt.timedelta(days=3)) == pytest.approx(10.0)


def test_a_clock_behind_an_entrys_start_costs_nothing_rather_than_a_refund():
    e = LedgerEntry("instance", "i-1", "launch", usd_per_hour=10.0, upfront_usd=1.0, started_at=START)
    assert e.cost(T0 - dt.timedelta(hours=2)) == 1.0


def test_recording_a_resource_again_replaces_it_and_keeps_other_kinds_with_the_same_id():
    ledger = empty().with_entry(LedgerEntry("instance", "x-1", "launch")).with_entry(
        LedgerEntry("launch-template", "x-1", "launch")).with_entry(LedgerEntry("instance", "x-1", "launch", zone="b"))
    assert [(e.kind, e.zone) for e in ledger.entries] == [("launch-template", ""), ("instance", "b")]


def test_ending_a_resource_ends_only_that_resource_and_keeps_its_first_end():
    ledger = empty().with_entry(LedgerEntry("instance", "i-1", "launch", started_at=START)).with_entry(
        LedgerEntry("instance", "i-2", "launch", started_at=START)).with_entry(
        LedgerEntry("placement-group", "i-1", "reserve", started_at=START))
    once = ledger.ended("instance", "i-1", T0 + dt.timedelta(hours=1))
    twice = once.ended("instance", "i-1", T0 + dt.timedelta(hours=5))
    assert [(e.kind, e.resource_id, e.ended_at) for e in twice.entries] == [
        ("instance", "i-1", "2026-11-29T11:00:00Z"), ("instance", "i-2", ""), ("placement-group", "i-1", "")]


def test_an_end_time_in_another_zone_is_recorded_in_utc():
    berlin = dt.timezone(dt.timedelta(hours=1))
    ledger = empty().with_entry(LedgerEntry("instance", "i-1", "launch", started_at=START))
    ended = ledger.ended("instance", "i-1", dt.datetime(2026, 11, 29, 12, 30, tzinfo=berlin))
    assert ended.entries[0].ended_at == "2026-11-29T11:30:00Z"
    assert now_str(dt.datetime(2026, 11, 29, 12, 30, tzinfo=berlin)) == "2026-11-29T11:30:00Z"
    assert parse_time("2026-11-29T11:30:00Z") == dt.datetime(2026, 11, 29, 11, 30, tzinfo=dt.timezone.utc)


def test_only_entries_not_ended_are_live_and_bill_by_the_hour():
    ledger = empty().with_entry(LedgerEntry("instance", "i-1", "launch", usd_per_hour=63.296, started_at=START)) \
        .with_entry(LedgerEntry("instance", "i-2", "launch", usd_per_hour=63.296, started_at=START,
                                ended_at="2026-11-29T11:00:00Z")) \
        .with_entry(LedgerEntry("capacity-reservation", "cr-1", "reserve", usd_per_hour=10.004, started_at=START))
    assert [e.resource_id for e in ledger.live()] == ["i-1", "cr-1"]
    assert [e.resource_id for e in ledger.live("instance")] == ["i-1"]
    assert hourly_burn(ledger) == 73.3


def test_spend_is_summed_per_stage_and_rounded_to_cents():
    ledger = empty().with_entry(LedgerEntry("instance", "i-1", "launch", upfront_usd=1.004)).with_entry(
        LedgerEntry("instance", "i-2", "launch", upfront_usd=2.0)).with_entry(
        LedgerEntry("capacity-block", "cr-1", "reserve", upfront_usd=3.333))
    assert spend_by_stage(ledger, T0) == {"launch": 3.0, "reserve": 3.33}


def test_a_token_generation_entry_names_its_request_and_number_and_costs_nothing():
    at = dt.datetime(2026, 11, 29, 10, 5, tzinfo=dt.timezone.utc)
    e = generation_entry("reserve/us-east-2a", Generation(3, at), "reserve", "the instances were terminated")
    assert e == LedgerEntry(TOKEN_GENERATION, "reserve/us-east-2a#3", "reserve", started_at="2026-11-29T10:05:00Z",
                            ended_at="2026-11-29T10:05:00Z", note="the instances were terminated")
    assert e.cost(T0 + dt.timedelta(hours=9)) == 0.0
    undated = generation_entry("launch", Generation(1), "launch", "why")
    assert (undated.started_at, undated.ended_at) == ("", "")


def test_the_latest_generation_of_each_request_wins_whatever_the_order():
    at = dt.datetime(2026, 11, 29, 10, 5, tzinfo=dt.timezone.utc)
    ledger = empty()
    for scope, number in (("reserve", 2), ("reserve", 3), ("reserve", 1), ("launch", 1)):
        ledger = ledger.with_entry(generation_entry(scope, Generation(number, at), "s", ""))
    ledger = ledger.with_entry(LedgerEntry("instance", "reserve#9", "launch"))  # not a generation
    ledger = ledger.with_entry(LedgerEntry(TOKEN_GENERATION, "no-number-here", "launch"))
    assert generations(ledger) == {"reserve": Generation(3, at), "launch": Generation(1, at)}


def test_a_generation_recorded_without_a_time_reads_back_without_one():
    ledger = empty().with_entry(generation_entry("launch", Generation(2), "launch", ""))
    assert generations(ledger) == {"launch": Generation(2, None)}


def test_a_generation_0_entry_does_not_count_as_a_new_generation():
    ledger = empty().with_entry(generation_entry("launch", Generation(0), "launch", ""))
    assert generations(ledger) == {}


def test_the_cost_table_lists_resources_not_token_generations_and_what_still_bills():
    ledger = empty().with_entry(LedgerEntry("instance", "i-1", "launch", "us-east-2a", 1234.5, 10.0, START)) \
        .with_entry(LedgerEntry("instance", "i-2", "launch", "us-east-2a", 2.0, 0.0, START, "2026-11-29T11:00:00Z")) \
        .with_entry(generation_entry("launch", Generation(1, T0), "launch", "why"))
    text = render_markdown(ledger, T0 + dt.timedelta(hours=2))
    assert text.splitlines()[0] == "## Cost ledger: dep run r1"
    assert "| i-1 | instance | launch | us-east-2a | 1,234.50 | 10.00 | 2026-11-29T10:00:00Z | running | 2,479.00 |" \
        in text
    assert "| i-2 | instance | launch | us-east-2a | 2.00 | 0.00 | 2026-11-29T10:00:00Z | 2026-11-29T11:00:00Z | 2.00 |" \
        in text
    assert "launch#1" not in text
    assert "| launch | 2,481.00 |" in text
    assert text.endswith("Still billing: $1,234.50/h\n")
