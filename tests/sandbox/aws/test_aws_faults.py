"""Scripted faults reach boto3 as the real EC2 error codes, as many times as asked."""

from __future__ import annotations

import urllib.error

import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from tests.sandbox.aws.helpers import admin, error_code, http_status, launch, reserve


@pytest.mark.parametrize(("action", "code", "status"), [
    ("CreateCapacityReservation", "InsufficientInstanceCapacity", 500),
    ("RunInstances", "InsufficientInstanceCapacity", 500),
    ("RunInstances", "RequestLimitExceeded", 503),
    ("CreateCapacityReservation", "Unsupported", 400),
    ("RunInstances", "ReservationCapacityExceeded", 400),
    ("DescribeCapacityReservations", "InternalError", 500),
    ("RunInstances", "VcpuLimitExceeded", 400),
])
def test_each_injected_fault_reaches_boto3_as_the_real_error_code(aws, ec2, action, code, status):
    admin(aws, "POST", "/__sandbox/faults", {"action": action, "code": code})
    calls = {
        "CreateCapacityReservation": lambda: reserve(ec2, 1),
        "RunInstances": lambda: launch(ec2, 1),
        "DescribeCapacityReservations": lambda: ec2.describe_capacity_reservations(),
    }
    with pytest.raises(ClientError) as exc:
        calls[action]()
    assert error_code(exc) == code
    assert http_status(exc) == status
    calls[action]()  # times defaults to 1: the next call goes through


def test_a_fault_fires_exactly_times_times(aws, ec2):
    admin(aws, "POST", "/__sandbox/faults",
          {"action": "CreateCapacityReservation", "code": "RequestLimitExceeded", "times": 3})
    failures = 0
    for _ in range(3):
        with pytest.raises(ClientError) as exc:
            reserve(ec2, 1)
        failures += error_code(exc) == "RequestLimitExceeded"
    reserve(ec2, 1)
    assert failures == 3


def test_a_fault_forever_lasts_until_faults_are_cleared(aws, ec2):
    admin(aws, "POST", "/__sandbox/faults",
          {"action": "*", "code": "InternalError", "times": -1})
    for _ in range(4):
        with pytest.raises(ClientError):
            ec2.describe_placement_groups()
    admin(aws, "DELETE", "/__sandbox/faults")
    assert ec2.describe_placement_groups()["PlacementGroups"] == []


def test_a_zone_fault_fails_that_zone_only(aws, ec2):
    admin(aws, "POST", "/__sandbox/faults", {"action": "CreateCapacityReservation",
                                             "code": "InsufficientInstanceCapacity",
                                             "zone": "us-east-2a", "times": -1})
    with pytest.raises(ClientError) as exc:
        reserve(ec2, 2, zone="us-east-2a")
    assert "us-east-2a" in exc.value.response["Error"]["Message"]
    assert reserve(ec2, 2, zone="us-east-2b")["AvailabilityZone"] == "us-east-2b"


def test_a_zone_fault_on_run_instances_uses_the_subnets_zone(aws, ec2):
    admin(aws, "POST", "/__sandbox/faults", {"action": "RunInstances", "code": "Unsupported",
                                             "zone": "us-east-2c"})
    subnets = ec2.describe_subnets(Filters=[{"Name": "availability-zone",
                                             "Values": ["us-east-2c"]}])["Subnets"]
    with pytest.raises(ClientError) as exc:
        launch(ec2, 1, SubnetId=subnets[0]["SubnetId"])
    assert error_code(exc) == "Unsupported"


def test_botocores_standard_retries_ride_out_a_single_throttle(aws, boto_session):
    retrying = boto_session.client("ec2", endpoint_url=aws.url,
                                   config=Config(retries={"mode": "standard", "max_attempts": 3}))
    admin(aws, "POST", "/__sandbox/faults",
          {"action": "DescribeCapacityReservations", "code": "RequestLimitExceeded"})
    out = retrying.describe_capacity_reservations()
    assert out["ResponseMetadata"]["RetryAttempts"] == 1


def test_a_launch_that_never_boots_stays_pending_without_a_node(aws, ec2):
    admin(aws, "POST", "/__sandbox/faults", {"fault": "never-boot"})
    stuck = launch(ec2, 1)
    healthy = launch(ec2, 1)

    instances = {i["InstanceId"]: i for r in ec2.describe_instances(
        InstanceIds=stuck + healthy)["Reservations"] for i in r["Instances"]}
    assert instances[stuck[0]]["State"]["Name"] == "pending"
    assert instances[healthy[0]]["State"]["Name"] == "running"
    assert not instances[stuck[0]]["PrivateIpAddress"].startswith("127.")
    assert "Output" not in ec2.get_console_output(InstanceId=stuck[0])
    topo = ec2.describe_instance_topology(InstanceIds=stuck + healthy)["Instances"]
    assert [i["InstanceId"] for i in topo] == healthy


def test_a_malformed_fault_is_refused_with_400(aws):
    with pytest.raises(urllib.error.HTTPError) as exc:
        admin(aws, "POST", "/__sandbox/faults", {"code": "InternalError"})
    assert exc.value.code == 400
    assert admin(aws, "GET", "/__sandbox/faults") == []
