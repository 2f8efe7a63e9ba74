"""Small helpers shared by the AWS endpoint tests (boto3 calls with the usual arguments)."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

# Retries off: each error reaches the test exactly as the endpoint sent it.
NO_RETRIES = Config(retries={"total_max_attempts": 1})


def error_code(exc: pytest.ExceptionInfo[ClientError]) -> str:
    return exc.value.response["Error"]["Code"]


def http_status(exc: pytest.ExceptionInfo[ClientError]) -> int:
    return exc.value.response["ResponseMetadata"]["HTTPStatusCode"]


def admin(endpoint: Any, method: str, path: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(endpoint.url + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    # 60 s: the endpoint shares a worker at the lowest priority of scripts/test, where a reset of
    # moto's state once waited more than 10 s for the CPU
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read() or b"null")


def subnet_in(ec2: Any, zone: str) -> str:
    subnets = ec2.describe_subnets(Filters=[{"Name": "availability-zone", "Values": [zone]}])
    return subnets["Subnets"][0]["SubnetId"]


def p5en_interfaces(subnet: str, group: str) -> list[dict[str, Any]]:
    """The p5en layout from the research note: 1 ENA + 16 efa-only on cards 0-15."""
    base = {"SubnetId": subnet, "Groups": [group], "DeleteOnTermination": True}
    nics = [{**base, "NetworkCardIndex": 0, "DeviceIndex": 0, "InterfaceType": "interface"},
            {**base, "NetworkCardIndex": 0, "DeviceIndex": 1, "InterfaceType": "efa-only"}]
    nics += [{**base, "NetworkCardIndex": c, "DeviceIndex": 0, "InterfaceType": "efa-only"}
             for c in range(1, 16)]
    return nics


def reserve(ec2: Any, count: int, zone: str = "us-east-2a", token: str | None = None,
            **extra: Any) -> dict[str, Any]:
    args: dict[str, Any] = {"InstanceType": "p5en.48xlarge", "InstancePlatform": "Linux/UNIX",
                            "AvailabilityZone": zone, "InstanceCount": count,
                            "InstanceMatchCriteria": "targeted", **extra}
    if token:
        args["ClientToken"] = token
    return ec2.create_capacity_reservation(**args)["CapacityReservation"]


def launch(ec2: Any, count: int, reservation_id: str | None = None, **extra: Any) -> list[str]:
    args: dict[str, Any] = dict(ImageId="ami-12c6146b", InstanceType="p5en.48xlarge",
                                MinCount=count, MaxCount=count, **extra)
    if reservation_id:
        args["CapacityReservationSpecification"] = {
            "CapacityReservationTarget": {"CapacityReservationId": reservation_id}}
    return [i["InstanceId"] for i in ec2.run_instances(**args)["Instances"]]
