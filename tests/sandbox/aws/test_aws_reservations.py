"""Capacity Reservations through boto3: idempotency, slots, cancel, filters, launch templates."""

from __future__ import annotations

import time

import pytest
from botocore.exceptions import ClientError

from sandbox.aws.config import AwsConfig
from tests.sandbox.aws.helpers import error_code, http_status, launch, reserve


def describe(ec2, reservation_id: str) -> dict:
    found = ec2.describe_capacity_reservations(CapacityReservationIds=[reservation_id])
    return found["CapacityReservations"][0]


def test_the_same_client_token_twice_returns_one_reservation(ec2):
    first = reserve(ec2, 4, token="run-1-us-east-2a-4")
    again = reserve(ec2, 4, token="run-1-us-east-2a-4")

    assert again["CapacityReservationId"] == first["CapacityReservationId"]
    assert len(ec2.describe_capacity_reservations()["CapacityReservations"]) == 1


def test_the_same_token_with_a_different_count_is_an_idempotent_parameter_mismatch(ec2):
    reserve(ec2, 4, token="tok")
    with pytest.raises(ClientError) as exc:
        reserve(ec2, 2, token="tok")
    assert error_code(exc) == "IdempotentParameterMismatch"


def test_the_same_token_in_another_zone_returns_the_first_zones_reservation(ec2):
    # EC2's documented exception: only the AZ differs, so the original result comes back.
    first = reserve(ec2, 2, zone="us-east-2a", token="tok")
    again = reserve(ec2, 2, zone="us-east-2b", token="tok")

    assert again["CapacityReservationId"] == first["CapacityReservationId"]
    assert again["AvailabilityZone"] == "us-east-2a"


@pytest.mark.parametrize("aws_config", [AwsConfig(reservation_pending_seconds=1.0)])
def test_a_new_reservation_is_pending_at_first_then_active(ec2):
    created = reserve(ec2, 1)
    assert created["State"] == "pending"
    # Already usable while pending, as EC2 documents.
    launch(ec2, 1, created["CapacityReservationId"])
    # Polled, not a fixed sleep against the window: pending for a while, then active for good.
    seen, deadline = [], time.monotonic() + 10.0
    while not seen or (seen[-1] == "pending" and time.monotonic() < deadline):
        seen.append(describe(ec2, created["CapacityReservationId"])["State"])
        if seen[-1] == "pending":
            time.sleep(0.1)
    assert set(seen[:-1]) <= {"pending"} and seen[-1] == "active", seen


def test_launches_take_slots_and_a_full_reservation_refuses_with_reservation_capacity_exceeded(ec2):
    cr = reserve(ec2, 2)["CapacityReservationId"]
    launched = launch(ec2, 2, cr)

    assert describe(ec2, cr)["AvailableInstanceCount"] == 0
    instance = ec2.describe_instances(InstanceIds=launched[:1])["Reservations"][0]["Instances"][0]
    assert instance["CapacityReservationId"] == cr
    with pytest.raises(ClientError) as exc:
        launch(ec2, 1, cr)
    assert error_code(exc) == "ReservationCapacityExceeded"
    assert http_status(exc) == 400


def test_terminating_an_instance_gives_its_slot_back(ec2):
    cr = reserve(ec2, 1)["CapacityReservationId"]
    first = launch(ec2, 1, cr)
    ec2.terminate_instances(InstanceIds=first)

    assert describe(ec2, cr)["AvailableInstanceCount"] == 1
    launch(ec2, 1, cr)


def test_cancel_releases_the_reserved_capacity_to_the_zone(ec2):
    # The default pool is 8 p5en per AZ: one reservation of 8 holds all of us-east-2a.
    cr = reserve(ec2, 8)["CapacityReservationId"]
    with pytest.raises(ClientError) as exc:
        reserve(ec2, 1)
    assert error_code(exc) == "InsufficientInstanceCapacity"

    assert ec2.cancel_capacity_reservation(CapacityReservationId=cr)["Return"] is True
    assert describe(ec2, cr)["State"] == "cancelled"
    assert describe(ec2, cr)["AvailableInstanceCount"] == 0
    reserve(ec2, 1)


def test_a_cancelled_reservation_takes_no_more_launches(ec2):
    cr = reserve(ec2, 2)["CapacityReservationId"]
    ec2.cancel_capacity_reservation(CapacityReservationId=cr)
    with pytest.raises(ClientError) as exc:
        launch(ec2, 1, cr)
    assert error_code(exc) == "ReservationCapacityExceeded"


@pytest.mark.parametrize("aws_config", [AwsConfig(vcpu_quotas={"L-417A185B": 100_000})])
def test_an_on_demand_launch_beyond_the_zones_pool_is_insufficient_instance_capacity(ec2):
    with pytest.raises(ClientError) as exc:
        launch(ec2, 9, Placement={"AvailabilityZone": "us-east-2b"})
    assert error_code(exc) == "InsufficientInstanceCapacity"
    assert http_status(exc) == 500


def test_a_reservation_can_name_its_zone_by_id(ec2):
    zones = {z["ZoneId"]: z["ZoneName"] for z in
             ec2.describe_availability_zones()["AvailabilityZones"]}
    zone_id = sorted(zones)[1]
    cr = ec2.create_capacity_reservation(InstanceType="p5en.48xlarge",
                                         InstancePlatform="Linux/UNIX", AvailabilityZoneId=zone_id,
                                         InstanceCount=1)["CapacityReservation"]
    assert (cr["AvailabilityZone"], cr["AvailabilityZoneId"]) == (zones[zone_id], zone_id)


@pytest.mark.parametrize("aws_config", [AwsConfig(capacity={"us-east-2a": {
    "p5en.48xlarge": 8, "p4d.24xlarge": 0}})])
def test_an_instance_type_a_zone_does_not_offer_is_unsupported(ec2):
    with pytest.raises(ClientError) as exc:
        ec2.create_capacity_reservation(InstanceType="p4d.24xlarge", InstancePlatform="Linux/UNIX",
                                        AvailabilityZone="us-east-2a", InstanceCount=1)
    assert error_code(exc) == "Unsupported"


def test_describe_finds_reservations_by_tag_and_state(ec2):
    tags = [{"ResourceType": "capacity-reservation",
             "Tags": [{"Key": "pdlift/run", "Value": "r-42"}]}]
    mine = reserve(ec2, 1, TagSpecifications=tags)["CapacityReservationId"]
    other = reserve(ec2, 1)["CapacityReservationId"]
    ec2.cancel_capacity_reservation(CapacityReservationId=other)

    by_tag = ec2.describe_capacity_reservations(
        Filters=[{"Name": "tag:pdlift/run", "Values": ["r-42"]}])["CapacityReservations"]
    by_state = ec2.describe_capacity_reservations(
        Filters=[{"Name": "state", "Values": ["cancelled"]}])["CapacityReservations"]

    assert [r["CapacityReservationId"] for r in by_tag] == [mine]
    assert by_tag[0]["Tags"] == [{"Key": "pdlift/run", "Value": "r-42"}]
    assert [r["CapacityReservationId"] for r in by_state] == [other]


def test_unknown_and_malformed_reservation_ids_get_ec2s_error_codes(ec2):
    with pytest.raises(ClientError) as missing:
        ec2.describe_capacity_reservations(CapacityReservationIds=["cr-0123456789abcdef0"])
    with pytest.raises(ClientError) as malformed:
        ec2.cancel_capacity_reservation(CapacityReservationId="not-an-id")
    assert error_code(missing) == "InvalidCapacityReservationId.NotFound"
    assert error_code(malformed) == "InvalidCapacityReservationId.Malformed"


def test_a_reservation_in_a_placement_group_carries_its_arn(ec2):
    group = ec2.create_placement_group(GroupName="pg", Strategy="cluster")["PlacementGroup"]
    cr = reserve(ec2, 2, PlacementGroupArn=group["GroupArn"])

    assert cr["PlacementGroupArn"] == group["GroupArn"]
    assert cr["ReservationType"] == "default"
    with pytest.raises(ClientError) as exc:
        reserve(ec2, 1, PlacementGroupArn=group["GroupArn"].replace("/pg", "/gone"))
    assert error_code(exc) == "InvalidPlacementGroup.Unknown"


def test_a_launch_template_carrying_the_reservation_target_and_group_is_honoured(ec2):
    ec2.create_placement_group(GroupName="pg", Strategy="cluster")
    cr = reserve(ec2, 2, zone="us-east-2b")["CapacityReservationId"]
    template = ec2.create_launch_template(LaunchTemplateName="nodes", LaunchTemplateData={
        "ImageId": "ami-12c6146b", "InstanceType": "p5en.48xlarge",
        "Placement": {"GroupName": "pg"},
        "CapacityReservationSpecification": {
            "CapacityReservationTarget": {"CapacityReservationId": cr}},
    })["LaunchTemplate"]["LaunchTemplateId"]

    out = ec2.run_instances(LaunchTemplate={"LaunchTemplateId": template}, MinCount=2,
                            MaxCount=2)
    with pytest.raises(ClientError) as exc:
        ec2.run_instances(LaunchTemplate={"LaunchTemplateId": template}, MinCount=1,
                          MaxCount=1)

    placements = [i["Placement"] for i in out["Instances"]]
    assert {p["AvailabilityZone"] for p in placements} == {"us-east-2b"}
    assert {p["GroupName"] for p in placements} == {"pg"}
    assert error_code(exc) == "ReservationCapacityExceeded"


def test_an_open_reservation_is_used_by_a_matching_launch_without_a_target(ec2):
    cr = reserve(ec2, 2, zone="us-east-2c", InstanceMatchCriteria="open")
    launch(ec2, 2, Placement={"AvailabilityZone": "us-east-2c"})

    assert describe(ec2, cr["CapacityReservationId"])["AvailableInstanceCount"] == 0


def test_on_demand_launches_stop_at_the_p_instance_vcpu_quota(ec2, aws_config):
    # 1536 vCPUs by default = 8 p5en (192 each); spread over two AZs to stay inside the pools.
    launch(ec2, 8, Placement={"AvailabilityZone": "us-east-2a"})
    with pytest.raises(ClientError) as exc:
        launch(ec2, 1, Placement={"AvailabilityZone": "us-east-2b"})
    assert error_code(exc) == "VcpuLimitExceeded"
