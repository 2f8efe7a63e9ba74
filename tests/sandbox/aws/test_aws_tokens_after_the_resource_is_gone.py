"""Client tokens whose resources are gone, as EC2 answers them: a launch token whose instances were
terminated is refused (IdempotentInstanceTerminated), a reservation token whose reservation was
cancelled returns the cancelled one, and a reservation that would end in the past is refused."""

from __future__ import annotations

import datetime as dt

import pytest
from botocore.exceptions import ClientError

from tests.sandbox.aws.helpers import error_code, launch, reserve


def test_the_same_launch_token_after_its_instances_were_terminated_is_refused(ec2):
    ids = launch(ec2, 2, ClientToken="gang-1")
    assert launch(ec2, 2, ClientToken="gang-1") == ids  # still running: the same instances
    ec2.terminate_instances(InstanceIds=ids)
    with pytest.raises(ClientError) as spent:
        launch(ec2, 2, ClientToken="gang-1")
    fresh = launch(ec2, 2, ClientToken="gang-1-g1")

    assert error_code(spent) == "IdempotentInstanceTerminated"
    assert set(fresh).isdisjoint(ids)


def test_the_same_reservation_token_after_a_cancel_returns_the_cancelled_reservation(ec2):
    end = dt.datetime.now(dt.UTC) + dt.timedelta(hours=3)
    first = reserve(ec2, 2, token="cr-tok", EndDateType="limited", EndDate=end)
    ec2.cancel_capacity_reservation(CapacityReservationId=first["CapacityReservationId"])
    again = reserve(ec2, 2, token="cr-tok", EndDateType="limited", EndDate=end)

    assert again["CapacityReservationId"] == first["CapacityReservationId"]
    assert again["State"] == "cancelled" and again["AvailableInstanceCount"] == 0


def test_a_reservation_that_would_end_in_the_past_is_refused(ec2):
    past = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    with pytest.raises(ClientError) as exc:
        reserve(ec2, 2, EndDateType="limited", EndDate=past)
    assert error_code(exc) == "InvalidParameterValue" and "EndDate" in str(exc.value)
    assert reserve(ec2, 2, EndDateType="limited", EndDate=past + dt.timedelta(hours=2))["State"] in (
        "pending", "active")
