"""Build every EC2 request pdlift sends, as plain dicts the adapter passes straight to boto3.

Pure. Shapes follow docs/sources.md#ec2-request-shapes (placement group, targeted ODCR in it,
Capacity Blocks, launch template with the p5en NIC layout, gang launch).
"""

from __future__ import annotations

import base64
import datetime as dt
from dataclasses import dataclass

from blueprints.schema import Blueprint
from tasks.planning import identity
from tasks.planning.identity import Generation, RunIdentity

STAGE_RESERVE = "reserve"
STAGE_LAUNCH = "launch"


def placement_group_name(run: RunIdentity) -> str:
    return run.prefix


def placement_group_request(run: RunIdentity) -> dict:
    """CreatePlacementGroup takes no ClientToken: the caller describes by name first."""
    return {
        "GroupName": placement_group_name(run),
        "Strategy": "cluster",
        "TagSpecifications": identity.tag_specifications("placement-group", run, STAGE_RESERVE,
                                                         name=placement_group_name(run)),
    }


def reservation_end(bp: Blueprint, run: RunIdentity, generation: Generation = Generation()) -> dt.datetime:
    """Deterministic per run and generation (a retried request carries identical parameters).
    Counted from the generation's start: reserving again after the first reservation is gone
    holds the capacity for ``duration_hours`` from then, not from the run's start (which may be
    long past: EC2 refuses an EndDate in the past)."""
    cap = bp.aws.capacity
    if cap.end_time:
        return cap.end_time.astimezone(dt.timezone.utc)
    began = generation.started_at or run.created_at
    start = began.astimezone(dt.timezone.utc).replace(minute=0, second=0, microsecond=0)
    return start + dt.timedelta(hours=(cap.duration_hours or 1) + 1)


def capacity_reservation_request(bp: Blueprint, run: RunIdentity, zone: str, pg_arn: str | None,
                                 generation: Generation = Generation()) -> dict:
    count = bp.node_count
    req = {
        "ClientToken": identity.client_token(run, STAGE_RESERVE, zone, count, generation=generation.number),
        "InstanceType": bp.aws.instance_type,
        "InstancePlatform": "Linux/UNIX",
        "AvailabilityZone": zone,
        "Tenancy": "default",
        "InstanceCount": count,
        "InstanceMatchCriteria": "targeted",
        "EndDateType": "limited",
        "EndDate": reservation_end(bp, run, generation),
        "TagSpecifications": identity.tag_specifications("capacity-reservation", run, STAGE_RESERVE,
                                                         name=f"{run.prefix}-{zone}"),
    }
    if pg_arn:
        req["PlacementGroupArn"] = pg_arn
    return req


def capacity_block_offerings_request(bp: Blueprint, now: dt.datetime) -> dict:
    return {
        "InstanceType": bp.aws.instance_type,
        "InstanceCount": bp.node_count,
        "CapacityDurationHours": bp.aws.capacity.duration_hours or 24,
        "StartDateRange": now,
        "EndDateRange": now + dt.timedelta(weeks=8),
    }


@dataclass(frozen=True)
class OfferingChoice:
    offering: dict | None
    reason: str


def choose_capacity_block(bp: Blueprint, offerings: list[dict]) -> OfferingChoice:
    """The earliest offering in a blueprint AZ whose upfront fee is within the limit."""
    limit = bp.aws.capacity.max_upfront_usd
    zones = bp.aws.availability_zones
    usable = [o for o in offerings if o.get("AvailabilityZone") in zones]
    if not usable:
        return OfferingChoice(None, f"no Capacity Block offering in {', '.join(zones)}")
    affordable = [o for o in usable if float(o.get("UpfrontFee", "inf")) <= limit]
    if not affordable:
        cheapest = min(float(o.get("UpfrontFee", "inf")) for o in usable)
        return OfferingChoice(None, f"cheapest offering costs ${cheapest:,.2f} upfront, above "
                                    f"aws.capacity.max_upfront_usd ${limit:,.2f}")
    best = min(affordable, key=lambda o: (o.get("StartDate"), zones.index(o["AvailabilityZone"]),
                                          float(o.get("UpfrontFee", "inf"))))
    return OfferingChoice(best, "earliest affordable offering")


def purchase_capacity_block_request(run: RunIdentity, offering_id: str) -> dict:
    """PurchaseCapacityBlock has no ClientToken: tags + describe-before-purchase guard it."""
    return {
        "CapacityBlockOfferingId": offering_id,
        "InstancePlatform": "Linux/UNIX",
        "TagSpecifications": identity.tag_specifications("capacity-reservation", run, STAGE_RESERVE,
                                                         name=f"{run.prefix}-block"),
    }


# --- launch ---------------------------------------------------------------------------------


def network_interfaces(network_info: dict, subnet: str, security_group: str) -> list[dict]:
    """The EFA layout from DescribeInstanceTypes NetworkInfo (never hard-coded card counts).

    Card 0 device 0 is the ENA primary ("interface"); card 0 device 1 is "efa-only" when card 0
    supports EFA; every other card gets "efa-only" at device 0 (docs/sources.md#efa-nic-layout).
    """
    base = {"SubnetId": subnet, "Groups": [security_group], "DeleteOnTermination": True}
    cards = sorted(network_info.get("NetworkCards") or [], key=lambda c: c["NetworkCardIndex"])
    efa_max = (network_info.get("EfaInfo") or {}).get("MaximumEfaInterfaces") or len(cards)
    nics = [{**base, "NetworkCardIndex": 0, "DeviceIndex": 0, "InterfaceType": "interface"}]
    efa = 0
    for card in cards:
        index = card["NetworkCardIndex"]
        # NetworkCardInfo.InterfaceTypes ("the supported interface types for the network card":
        # interface | efa | efa-only | secondary) is in the EC2 model since botocore 1.44; a
        # response without it (older API versions, moto) keeps the documented p5en layout.
        if efa >= efa_max or "efa-only" not in card.get("InterfaceTypes", ["efa-only"]):
            continue
        device = 1 if index == 0 else 0
        nics.append({**base, "NetworkCardIndex": index, "DeviceIndex": device, "InterfaceType": "efa-only"})
        efa += 1
    return nics


def nodeadm_user_data(cluster: str, endpoint: str, ca_b64: str, service_cidr: str,
                      labels: dict[str, str], taints: list[str]) -> str:
    """MIME multipart user data with an AL2023 nodeadm NodeConfig (docs/sources.md#nodeadm-user-data)."""
    label_flag = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
    flags = [f"--node-labels={label_flag}"]
    if taints:
        flags.append(f"--register-with-taints={','.join(taints)}")
    flag_lines = "".join(f"      - {_yaml_quote(f)}\n" for f in flags)
    node_config = (
        "apiVersion: node.eks.aws/v1alpha1\n"
        "kind: NodeConfig\n"
        "spec:\n"
        "  cluster:\n"
        f"    name: {_yaml_quote(cluster)}\n"
        f"    apiServerEndpoint: {_yaml_quote(endpoint)}\n"
        f"    certificateAuthority: {_yaml_quote(ca_b64)}\n"
        f"    cidr: {_yaml_quote(service_cidr)}\n"
        "  kubelet:\n"
        "    flags:\n"
        f"{flag_lines}"
        "  instance:\n"
        "    localStorage:\n"
        "      strategy: RAID0\n"
    )
    boundary = "PDLIFT-NODEADM-BOUNDARY"
    return (
        "MIME-Version: 1.0\n"
        f'Content-Type: multipart/mixed; boundary="{boundary}"\n\n'
        f"--{boundary}\n"
        "Content-Type: application/node.eks.aws\n\n"
        f"{node_config}\n"
        f"--{boundary}--\n"
    )


def _yaml_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(frozen=True)
class LaunchInputs:
    image_id: str
    subnet: str
    security_group: str
    key_pair: str
    instance_profile: str
    reservation_id: str | None
    placement_group: str | None
    capacity_block: bool
    user_data: str


def launch_template_request(bp: Blueprint, run: RunIdentity, network_info: dict, inputs: LaunchInputs) -> dict:
    data: dict = {
        "ImageId": inputs.image_id,
        "InstanceType": bp.aws.instance_type,
        "KeyName": inputs.key_pair,
        "UserData": base64.b64encode(inputs.user_data.encode()).decode(),
        "NetworkInterfaces": network_interfaces(network_info, inputs.subnet, inputs.security_group),
        "MetadataOptions": {"HttpTokens": "required", "HttpPutResponseHopLimit": 2, "HttpEndpoint": "enabled"},
        "TagSpecifications": [
            {"ResourceType": "instance", "Tags": identity.tags(run, STAGE_LAUNCH, name=f"{run.prefix}-node")},
            {"ResourceType": "volume", "Tags": identity.tags(run, STAGE_LAUNCH)},
        ],
    }
    if inputs.instance_profile:
        key = "Arn" if inputs.instance_profile.startswith("arn:") else "Name"
        data["IamInstanceProfile"] = {key: inputs.instance_profile}
    if inputs.reservation_id:
        data["CapacityReservationSpecification"] = {
            "CapacityReservationTarget": {"CapacityReservationId": inputs.reservation_id}}
    if inputs.placement_group:
        data["Placement"] = {"GroupName": inputs.placement_group}
    if inputs.capacity_block:
        data["InstanceMarketOptions"] = {"MarketType": "capacity-block"}
    return {
        "LaunchTemplateName": run.prefix,
        "ClientToken": identity.client_token(run, STAGE_LAUNCH, "template", bp.node_count, inputs.reservation_id or ""),
        "LaunchTemplateData": data,
        "TagSpecifications": identity.tag_specifications("launch-template", run, STAGE_LAUNCH, name=run.prefix),
    }


def run_instances_request(run: RunIdentity, template_id: str, count: int, attempt: int = 0,
                          generation: int = 0) -> dict:
    """Gang launch: MinCount = MaxCount = N, all or nothing, with a ClientToken per attempt and
    token generation (a new generation once the instances of the earlier one are terminated)."""
    return {
        "LaunchTemplate": {"LaunchTemplateId": template_id, "Version": "$Latest"},
        "MinCount": count,
        "MaxCount": count,
        "ClientToken": identity.client_token(run, STAGE_LAUNCH, template_id, count, f"attempt-{attempt}",
                                             generation),
    }
