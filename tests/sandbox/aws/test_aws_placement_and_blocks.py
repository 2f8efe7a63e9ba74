"""Placement groups and Capacity Blocks through boto3."""

from __future__ import annotations

import datetime as dt

import pytest
from botocore.exceptions import ClientError

from tests.sandbox.aws.helpers import error_code, launch


def test_a_placement_group_lives_until_deleted_and_names_are_unique(ec2):
    tags = [{"ResourceType": "placement-group", "Tags": [{"Key": "pdlift/run", "Value": "r1"}]}]
    made = ec2.create_placement_group(GroupName="pg", Strategy="cluster",
                                      TagSpecifications=tags)["PlacementGroup"]
    with pytest.raises(ClientError) as duplicate:
        ec2.create_placement_group(GroupName="pg", Strategy="cluster")

    found = ec2.describe_placement_groups(GroupNames=["pg"])["PlacementGroups"]
    by_tag = ec2.describe_placement_groups(
        Filters=[{"Name": "tag:pdlift/run", "Values": ["r1"]}])["PlacementGroups"]
    ec2.delete_placement_group(GroupName="pg")
    with pytest.raises(ClientError) as gone:
        ec2.describe_placement_groups(GroupNames=["pg"])
    with pytest.raises(ClientError) as delete_again:
        ec2.delete_placement_group(GroupName="pg")

    assert made["GroupArn"].endswith(":placement-group/pg")
    assert found[0]["Strategy"] == "cluster" and found[0]["State"] == "available"
    assert [g["GroupId"] for g in by_tag] == [made["GroupId"]]
    assert error_code(duplicate) == "InvalidPlacementGroup.Duplicate"
    assert error_code(gone) == "InvalidPlacementGroup.Unknown"
    assert error_code(delete_again) == "InvalidPlacementGroup.Unknown"


def test_a_placement_group_is_in_use_while_its_instances_run(ec2):
    ec2.create_placement_group(GroupName="pg", Strategy="cluster")
    ids = launch(ec2, 2, Placement={"GroupName": "pg"})
    with pytest.raises(ClientError) as in_use:
        ec2.delete_placement_group(GroupName="pg")
    ec2.terminate_instances(InstanceIds=ids)

    assert error_code(in_use) == "InvalidPlacementGroup.InUse"
    ec2.delete_placement_group(GroupName="pg")


def test_launching_into_an_unknown_placement_group_is_refused(ec2):
    with pytest.raises(ClientError) as exc:
        launch(ec2, 1, Placement={"GroupName": "nope"})
    assert error_code(exc) == "InvalidPlacementGroup.Unknown"


def offerings(ec2, count: int = 2, hours: int = 48) -> list[dict]:
    return ec2.describe_capacity_block_offerings(
        InstanceType="p5en.48xlarge", InstanceCount=count,
        CapacityDurationHours=hours)["CapacityBlockOfferings"]


def test_capacity_block_offerings_end_at_1130_utc_and_quote_the_upfront_fee(ec2):
    found = offerings(ec2, count=2, hours=48)

    assert 1 <= len(found) <= 6
    for offer in found:
        end = offer["EndDate"].astimezone(dt.UTC)
        assert (end.hour, end.minute) == (11, 30)
        # A block starting now runs until the 11:30 UTC nearest its nominal end.
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


def test_a_purchased_block_is_an_active_reservation_that_cannot_be_cancelled(ec2):
    offer = offerings(ec2)[0]
    tags = [{"ResourceType": "capacity-reservation",
             "Tags": [{"Key": "pdlift/run", "Value": "r1"}]}]
    block = ec2.purchase_capacity_block(CapacityBlockOfferingId=offer["CapacityBlockOfferingId"],
                                        InstancePlatform="Linux/UNIX",
                                        TagSpecifications=tags)["CapacityReservation"]
    with pytest.raises(ClientError) as cancel:
        ec2.cancel_capacity_reservation(CapacityReservationId=block["CapacityReservationId"])
    with pytest.raises(ClientError) as twice:
        ec2.purchase_capacity_block(CapacityBlockOfferingId=offer["CapacityBlockOfferingId"],
                                    InstancePlatform="Linux/UNIX")

    assert block["ReservationType"] == "capacity-block"
    assert block["State"] == "active"
    assert block["TotalInstanceCount"] == 2
    assert block["AvailabilityZone"] == offer["AvailabilityZone"]
    assert block["Tags"] == [{"Key": "pdlift/run", "Value": "r1"}]
    assert error_code(cancel) == "UnsupportedOperation"
    assert error_code(twice) == "InvalidParameterValue"


def test_launching_into_a_block_needs_the_capacity_block_market_type(ec2):
    offer = offerings(ec2)[0]
    block = ec2.purchase_capacity_block(CapacityBlockOfferingId=offer["CapacityBlockOfferingId"],
                                        InstancePlatform="Linux/UNIX")["CapacityReservation"]
    cr = block["CapacityReservationId"]
    with pytest.raises(ClientError) as plain:
        launch(ec2, 2, cr)
    ids = launch(ec2, 2, cr, InstanceMarketOptions={"MarketType": "capacity-block"})

    assert error_code(plain) == "InvalidParameterCombination"
    assert len(ids) == 2
    left = ec2.describe_capacity_reservations(CapacityReservationIds=[cr])
    assert left["CapacityReservations"][0]["AvailableInstanceCount"] == 0
