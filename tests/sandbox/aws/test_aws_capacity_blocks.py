"""Capacity Blocks through boto3, as EC2 sells them: offerings in pages, a start in the future, a
bought block that walks payment-pending -> scheduled -> active (-> expired), zero capacity and
refused launches before its start, and EC2's own codes for offering ids that cannot be bought."""

from __future__ import annotations

import datetime as dt
import time

import pytest
from botocore.exceptions import ClientError

from sandbox.aws.config import AwsConfig
from sandbox.aws.reservations import Reservation
from tests.sandbox.aws.helpers import error_code, http_status, launch

# Seconds, not hours: the block starts 6 s after the search, payment clears in 0.3 s. (With 1.5 s,
# a worker at scripts/test's lowest priority once made its "too early" launch after the start.)
SOON = AwsConfig(reservation_pending_seconds=0.0, capacity_block_start_seconds=6.0,
                 capacity_block_payment_seconds=0.3)
MARKET = {"MarketType": "capacity-block"}


def offerings(ec2, count: int = 2, hours: int = 48) -> list[dict]:
    pages = ec2.get_paginator("describe_capacity_block_offerings").paginate(
        InstanceType="p5en.48xlarge", InstanceCount=count, CapacityDurationHours=hours)
    return [o for page in pages for o in page["CapacityBlockOfferings"]]


def buy(ec2, offer: dict, **extra) -> dict:
    return ec2.purchase_capacity_block(CapacityBlockOfferingId=offer["CapacityBlockOfferingId"],
                                       InstancePlatform="Linux/UNIX", **extra)["CapacityReservation"]


def describe(ec2, reservation_id: str) -> dict:
    return ec2.describe_capacity_reservations(CapacityReservationIds=[reservation_id])["CapacityReservations"][0]


def test_capacity_block_offerings_end_at_1130_utc_and_quote_the_upfront_fee(ec2):
    found = offerings(ec2, count=2, hours=48)

    assert 1 <= len(found) <= 6
    for offer in found:
        end = offer["EndDate"].astimezone(dt.UTC)
        assert (end.hour, end.minute) == (11, 30)
        # A block starting off the 11:30 grid runs until the 11:30 UTC nearest its nominal end.
        length = offer["EndDate"] - offer["StartDate"]
        assert dt.timedelta(hours=24) < length <= dt.timedelta(hours=48 + 24)
        assert offer["CapacityBlockDurationHours"] == 48
        # The default offering price is 43.26 USD per instance-hour.
        assert offer["UpfrontFee"] == f"{43.26 * 2 * 48:.2f}"
        assert offer["CurrencyCode"] == "USD"


def test_capacity_block_durations_follow_ec2s_steps(ec2):
    with pytest.raises(ClientError) as exc:
        offerings(ec2, hours=30)
    assert error_code(exc) == "InvalidParameterValue"
    assert offerings(ec2, hours=21 * 24)


def test_by_default_every_offering_starts_in_the_future(ec2):
    before = dt.datetime.now(dt.UTC)
    found = offerings(ec2)
    # The default earliest start is a minute after the search (config.capacity_block_start_seconds).
    assert AwsConfig().capacity_block_start_seconds == 60.0
    assert min(o["StartDate"] for o in found) >= before + dt.timedelta(seconds=59)


def test_offerings_come_in_pages_and_the_next_page_continues_the_same_search(ec2):
    first = ec2.describe_capacity_block_offerings(InstanceType="p5en.48xlarge", InstanceCount=2,
                                                  CapacityDurationHours=48)
    time.sleep(1.1)  # a new search now would quote later starts (other ids)
    second = ec2.describe_capacity_block_offerings(InstanceType="p5en.48xlarge", InstanceCount=2,
                                                   CapacityDurationHours=48, NextToken=first["NextToken"])
    one = ec2.describe_capacity_block_offerings(InstanceType="p5en.48xlarge", InstanceCount=2,
                                                CapacityDurationHours=48, MaxResults=1)
    with pytest.raises(ClientError) as bad:
        ec2.describe_capacity_block_offerings(InstanceType="p5en.48xlarge", InstanceCount=2,
                                              CapacityDurationHours=48, NextToken="nonsense")

    ids = [o["CapacityBlockOfferingId"] for o in first["CapacityBlockOfferings"] + second["CapacityBlockOfferings"]]
    assert len(first["CapacityBlockOfferings"]) == AwsConfig().capacity_block_page_size == 2
    assert len(ids) == len(set(ids)) == 4
    assert [o["StartDate"] for o in first["CapacityBlockOfferings"]] <= \
        [o["StartDate"] for o in second["CapacityBlockOfferings"]]
    assert len(one["CapacityBlockOfferings"]) == 1 and "NextToken" in one
    assert error_code(bad) == "InvalidPaginationToken"


@pytest.mark.parametrize("aws_config", [SOON])
def test_a_bought_block_is_payment_pending_then_scheduled_with_no_capacity_then_active_for_its_market(ec2):
    offer = min(offerings(ec2), key=lambda o: o["StartDate"])
    tags = [{"ResourceType": "capacity-reservation", "Tags": [{"Key": "pdlift/run", "Value": "r1"}]}]
    block = buy(ec2, offer, TagSpecifications=tags)
    cr = block["CapacityReservationId"]
    with pytest.raises(ClientError) as cancel:
        ec2.cancel_capacity_reservation(CapacityReservationId=cr)
    time.sleep(0.4)
    scheduled = describe(ec2, cr)
    with pytest.raises(ClientError) as early:
        launch(ec2, 2, cr, InstanceMarketOptions=MARKET)
    time.sleep(max(0.0, (offer["StartDate"] - dt.datetime.now(dt.UTC)).total_seconds()) + 0.1)
    active = describe(ec2, cr)
    with pytest.raises(ClientError) as plain:  # a block needs the capacity-block market type
        launch(ec2, 2, cr)
    ids = launch(ec2, 2, cr, InstanceMarketOptions=MARKET)

    assert block["ReservationType"] == "capacity-block" and block["State"] == "payment-pending"
    assert block["StartDate"] == offer["StartDate"] and block["EndDate"] == offer["EndDate"]
    assert block["TotalInstanceCount"] == 2 and block["AvailableInstanceCount"] == 0
    assert block["AvailabilityZone"] == offer["AvailabilityZone"]
    assert block["Tags"] == [{"Key": "pdlift/run", "Value": "r1"}]
    assert error_code(cancel) == "UnsupportedOperation"
    # "Before a Capacity Block reservation begins, the available capacity appears as zero."
    assert scheduled["State"] == "scheduled" and scheduled["AvailableInstanceCount"] == 0
    assert error_code(early) == "InvalidCapacityReservationState.PendingActivation"
    assert http_status(early) == 400
    assert active["State"] == "active" and active["AvailableInstanceCount"] == 2
    assert error_code(plain) == "InvalidParameterCombination"
    assert len(ids) == 2 and describe(ec2, cr)["AvailableInstanceCount"] == 0


def test_an_offering_id_that_cannot_be_bought_gets_ec2s_own_code(ec2):
    offer = offerings(ec2)[0]
    buy(ec2, offer)
    with pytest.raises(ClientError) as twice:
        buy(ec2, offer)
    with pytest.raises(ClientError) as unknown:
        buy(ec2, {"CapacityBlockOfferingId": "cb-0123456789abcdef0"})
    with pytest.raises(ClientError) as malformed:
        buy(ec2, {"CapacityBlockOfferingId": "not-an-offering"})

    assert error_code(twice) == "InvalidCapacityBlockOfferingIdExpired"
    assert error_code(unknown) == "InvalidCapacityBlockOfferingIdNotFound"
    assert error_code(malformed) == "InvalidCapacityBlockOfferingIdMalformed"


def test_a_block_walks_its_states_by_the_clock_and_is_expired_after_its_end():
    t0 = dt.datetime(2026, 12, 1, 9, tzinfo=dt.UTC)
    block = Reservation("cr-0123456789abcdef0", "us-east-2", "1", "us-east-2a", "use2-az1", "p5en.48xlarge",
                        "Linux/UNIX", 2, t0, t0, start=t0 + dt.timedelta(hours=2), end=t0 + dt.timedelta(hours=26),
                        reservation_type="capacity-block", payment_until=t0 + dt.timedelta(minutes=1))
    at = [t0, t0 + dt.timedelta(minutes=1), t0 + dt.timedelta(hours=2), t0 + dt.timedelta(hours=26)]
    assert [block.state(t) for t in at] == ["payment-pending", "scheduled", "active", "expired"]
