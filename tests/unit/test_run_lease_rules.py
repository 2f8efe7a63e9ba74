"""Who may drive a run (``tasks.planning.lease``): the expiry instant, the holder's own process
and flow run, the lease a taker writes, and the stored form."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from tasks.planning.lease import Holder, Lease, dumps, is_mine, loads, may_take, taken

T0 = dt.datetime(2026, 12, 2, 10, 0, 0, tzinfo=dt.timezone.utc)
AT_EXPIRY = "2026-12-02T10:00:00Z"
A = Holder("flow-run-a", "host-a:1")
B = Holder("flow-run-b", "host-b:2")


def held_by(holder: Holder, expires_at: str = "2026-12-02T10:03:00Z", taken_at: str = "2026-12-02T09:00:00Z") -> Lease:
    return Lease("dep", "r1", holder.flow_run_id, holder.worker, expires_at, taken_at)


def test_a_lease_that_expires_exactly_now_is_free():
    lease = held_by(A, expires_at=AT_EXPIRY)
    assert lease.expired(T0)
    assert may_take(lease, B, T0, holder_ended=False)


def test_a_lease_one_second_before_its_expiry_still_refuses_another_holder():
    lease = held_by(A, expires_at=AT_EXPIRY)
    one_second_before = T0 - dt.timedelta(seconds=1)
    assert not lease.expired(one_second_before)
    assert not may_take(lease, B, one_second_before, holder_ended=False)


def test_a_live_lease_of_another_holder_is_free_once_its_flow_run_ended():
    assert may_take(held_by(A), B, T0, holder_ended=True)


def test_a_free_run_may_be_taken():
    assert may_take(None, B, T0, holder_ended=False)


def test_the_holders_own_process_may_take_its_live_lease_again_under_another_flow_run():
    same_process = Holder("flow-run-sub", A.worker)
    assert is_mine(held_by(A), same_process)
    assert may_take(held_by(A), same_process, T0, holder_ended=False)


def test_the_holders_own_flow_run_may_take_it_again_from_another_process():
    resumed_elsewhere = Holder(A.flow_run_id, "host-c:3")
    assert is_mine(held_by(A), resumed_elsewhere)
    assert may_take(held_by(A), resumed_elsewhere, T0, holder_ended=False)


def test_a_process_outside_any_flow_run_does_not_own_a_lease_taken_outside_a_flow_run_elsewhere():
    # Both flow run ids are "": that they are equal says nothing about who holds the run.
    lease = held_by(Holder("", "host-a:1"))
    assert not is_mine(lease, Holder("", "host-b:2"))
    assert not may_take(lease, Holder("", "host-b:2"), T0, holder_ended=False)


def test_another_holder_neither_same_process_nor_same_flow_run_is_not_the_owner():
    assert not is_mine(held_by(A), B)


def test_a_fresh_lease_names_its_taker_and_runs_from_now_for_its_ttl():
    lease = taken(None, "dep", "r1", B, T0, 180.0)
    assert lease == Lease("dep", "r1", "flow-run-b", "host-b:2", "2026-12-02T10:03:00Z", "2026-12-02T10:00:00Z")


def test_taking_over_an_expired_lease_of_another_holder_writes_a_lease_of_ones_own():
    old = held_by(A, expires_at=AT_EXPIRY)
    lease = taken(old, "dep", "r1", B, T0, 60.0)
    assert lease == Lease("dep", "r1", "flow-run-b", "host-b:2", "2026-12-02T10:01:00Z", "2026-12-02T10:00:00Z")


def test_a_subflow_in_the_holders_process_keeps_the_flow_run_that_took_the_lease_and_its_start():
    subflow = Holder("flow-run-sub", A.worker)
    lease = taken(held_by(A), "dep", "r1", subflow, T0, 60.0)
    assert lease == Lease("dep", "r1", "flow-run-a", "host-a:1", "2026-12-02T10:01:00Z", "2026-12-02T09:00:00Z")


def test_the_holders_flow_run_resumed_on_another_worker_keeps_holding_it_from_that_worker():
    resumed = Holder(A.flow_run_id, "host-c:3")
    lease = taken(held_by(A), "dep", "r1", resumed, T0, 60.0)
    assert lease == Lease("dep", "r1", "flow-run-a", "host-c:3", "2026-12-02T10:01:00Z", "2026-12-02T09:00:00Z")


def test_an_expired_lease_of_its_own_process_goes_to_the_next_flow_run_in_its_own_name():
    # a released lease (expiry in the past) of this process: the next flow run holds it, fresh
    next_flow = Holder("flow-run-next", A.worker)
    lease = taken(held_by(A, expires_at=AT_EXPIRY), "dep", "r1", next_flow, T0, 60.0)
    assert lease == Lease("dep", "r1", "flow-run-next", "host-a:1", "2026-12-02T10:01:00Z", "2026-12-02T10:00:00Z")


def test_the_holders_own_flow_run_taking_back_its_expired_lease_keeps_when_it_first_took_it():
    lease = taken(held_by(A, expires_at=AT_EXPIRY), "dep", "r1", A, T0, 60.0)
    assert (lease.flow_run_id, lease.taken_at) == ("flow-run-a", "2026-12-02T09:00:00Z")


def test_a_lease_pushed_forward_keeps_the_run_it_belongs_to():
    lease = taken(held_by(A), "other-dep", "r9", A, T0, 60.0)
    assert (lease.deployment, lease.run_id) == ("other-dep", "r9")


def test_a_released_lease_is_written_with_an_expiry_in_the_past():
    released = taken(held_by(A), "dep", "r1", A, T0, -1.0)
    assert released.expired(T0) and released.expires_at == "2026-12-02T09:59:59Z"


def test_the_holder_description_names_the_run_flow_run_worker_and_expiry():
    assert held_by(A).describe() == ("run r1 is held by flow run flow-run-a on worker host-a:1 "
                                     "until 2026-12-02T10:03:00Z")


def test_a_lease_taken_outside_a_flow_run_is_described_as_held_by_no_flow_run():
    assert "held by flow run (none) on worker host-a:1" in held_by(Holder("", "host-a:1")).describe()


def test_a_stored_lease_round_trips_and_says_what_it_is():
    lease = held_by(A)
    raw = json.loads(dumps(lease))
    assert raw["kind"] == "pdlift-run-lease" and raw["worker"] == "host-a:1"
    assert loads(dumps(lease)) == lease


def test_fields_a_newer_pdlift_added_are_ignored_when_reading_a_lease():
    raw = json.loads(dumps(held_by(A)))
    raw["priority"] = 7
    assert loads(json.dumps(raw).encode()) == held_by(A)


@pytest.mark.parametrize("data", [b'{"kind": "something-else"}', b"[1, 2]"])
def test_a_document_that_is_not_a_run_lease_is_refused(data):
    with pytest.raises(ValueError) as caught:
        loads(data)
    assert str(caught.value) == "not a pdlift run lease"
