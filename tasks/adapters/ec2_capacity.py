"""EC2 capacity: preflight look-ups, placement groups, capacity reservations, Capacity Blocks.

The only code that calls these EC2 APIs. Requests come ready-made from
``tasks.planning.ec2_requests``; results go out as small frozen records.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from tasks.adapters.aws_client import call
from tasks.errors import RequestRejected, ResourceGone

P_INSTANCE_VCPU_QUOTA = "L-417A185B"  # Running On-Demand P instances (vCPUs)


@dataclass(frozen=True)
class Reservation:
    reservation_id: str
    zone: str
    instance_type: str
    state: str
    total: int
    available: int
    tenancy: str
    reservation_type: str
    placement_group_arn: str
    end_date: dt.datetime | None
    tags: dict[str, str]
    start_date: dt.datetime | None = None  # a Capacity Block is unusable before it

    @property
    def placement_group(self) -> str | None:
        """The name of the cluster placement group the reservation is in (the ARN ends in
        ``placement-group/NAME``), or None."""
        return self.placement_group_arn.rsplit("/", 1)[-1] if self.placement_group_arn else None

    @property
    def usable(self) -> bool:
        # A new reservation may say "pending" for minutes while already usable (docs/sources.md#odcr-pending-usable).
        return self.state in ("active", "pending") and self.available >= 0 and self.total > 0


def _reservation(r: dict) -> Reservation:
    return Reservation(
        r["CapacityReservationId"], r.get("AvailabilityZone", ""), r.get("InstanceType", ""),
        r.get("State", ""), int(r.get("TotalInstanceCount", 0)), int(r.get("AvailableInstanceCount", 0)),
        r.get("Tenancy", "default"), r.get("ReservationType", "default"), r.get("PlacementGroupArn", ""),
        r.get("EndDate"), {t["Key"]: t["Value"] for t in r.get("Tags", [])}, r.get("StartDate"))


class Ec2Capacity:
    """Capacity calls against one region. ``describe`` and ``create`` are boto3 EC2 clients
    (adaptive retries for reads, SDK retries off for writes)."""

    def __init__(self, describe, create, ssm=None, quotas=None):
        self._d, self._c, self._ssm, self._quotas = describe, create, ssm, quotas

    # --- preflight -----------------------------------------------------------------------

    def instance_type_info(self, instance_type: str) -> dict:
        out = call(self._d.describe_instance_types, "DescribeInstanceTypes", InstanceTypes=[instance_type])
        if not out.get("InstanceTypes"):
            raise RequestRejected(f"instance type {instance_type} is unknown in this region")
        return out["InstanceTypes"][0]

    def offered_in_zone(self, instance_type: str, zone: str) -> bool:
        out = call(self._d.describe_instance_type_offerings, "DescribeInstanceTypeOfferings",
                   LocationType="availability-zone",
                   Filters=[{"Name": "instance-type", "Values": [instance_type]},
                            {"Name": "location", "Values": [zone]}])
        return bool(out.get("InstanceTypeOfferings"))

    def subnet(self, ref: str) -> tuple[str, str]:
        """(subnet id, AZ) for a subnet id or Name tag."""
        key = "subnet-id" if _looks_like_id(ref, "subnet-") else "tag:Name"
        out = call(self._d.describe_subnets, "DescribeSubnets", Filters=[{"Name": key, "Values": [ref]}])
        subnets = out.get("Subnets", [])
        if not subnets:
            raise RequestRejected(f"subnet {ref} not found. Fix: aws.subnets in the blueprint")
        return subnets[0]["SubnetId"], subnets[0]["AvailabilityZone"]

    def security_group(self, ref: str) -> tuple[str, bool]:
        """(group id, allows all traffic to and from itself in both directions)."""
        key = "group-id" if _looks_like_id(ref, "sg-") else "group-name"
        out = call(self._d.describe_security_groups, "DescribeSecurityGroups",
                   Filters=[{"Name": key, "Values": [ref]}])
        groups = out.get("SecurityGroups", [])
        if not groups:
            raise RequestRejected(f"security group {ref} not found. Fix: aws.security_group in the blueprint")
        g = groups[0]
        return g["GroupId"], _self_all(g["GroupId"], g.get("IpPermissions", [])) and \
            _self_all(g["GroupId"], g.get("IpPermissionsEgress", []))

    def ami_from_ssm(self, parameter: str) -> str:
        out = call(self._ssm.get_parameter, "ssm:GetParameter", Name=parameter)
        return out["Parameter"]["Value"]

    def p_vcpu_quota(self) -> float | None:
        """The On-Demand P-instance vCPU quota, or None where the quota API does not answer."""
        if self._quotas is None:
            return None
        try:
            out = call(self._quotas.get_service_quota, "servicequotas:GetServiceQuota", attempts=1,
                       ServiceCode="ec2", QuotaCode=P_INSTANCE_VCPU_QUOTA)
        except Exception:  # noqa: BLE001 - optional check: the quota API is not everywhere
            return None
        return float(out["Quota"]["Value"])

    # --- placement groups ------------------------------------------------------------------

    def find_placement_group(self, name: str) -> dict | None:
        try:
            out = call(self._d.describe_placement_groups, "DescribePlacementGroups", GroupNames=[name])
        except ResourceGone:
            return None
        groups = out.get("PlacementGroups", [])
        return groups[0] if groups else None

    def placement_groups(self, filters: list[dict]) -> list[dict]:
        out = call(self._d.describe_placement_groups, "DescribePlacementGroups", Filters=filters)
        return [g for g in out.get("PlacementGroups", []) if g.get("State") not in ("deleting", "deleted")]

    def create_placement_group(self, request: dict) -> dict:
        """Describe-before-create (no ClientToken on this call); a Duplicate counts as success."""
        found = self.find_placement_group(request["GroupName"])
        if found:
            return found
        try:
            call(self._c.create_placement_group, "CreatePlacementGroup", **request)
        except RequestRejected as e:
            if e.code != "InvalidPlacementGroup.Duplicate":
                raise
        found = self.find_placement_group(request["GroupName"])
        if not found:
            raise RequestRejected(f"placement group {request['GroupName']} not visible after create")
        return found

    def delete_placement_group(self, name: str) -> bool:
        """True when deleted or already gone; False while instances are still in it (InUse)."""
        try:
            call(self._c.delete_placement_group, "DeletePlacementGroup", GroupName=name)
        except ResourceGone:
            return True
        except RequestRejected as e:
            if e.code == "InvalidPlacementGroup.InUse":
                return False
            raise
        return True

    # --- reservations ----------------------------------------------------------------------

    def reservations(self, filters: list[dict] | None = None, ids: list[str] | None = None) -> list[Reservation]:
        params: dict = {}
        if filters:
            params["Filters"] = filters
        if ids:
            params["CapacityReservationIds"] = ids
        out = call(self._d.describe_capacity_reservations, "DescribeCapacityReservations", **params)
        return [_reservation(r) for r in out.get("CapacityReservations", [])]

    def reservation(self, reservation_id: str) -> Reservation | None:
        """None when EC2 no longer knows the id (long expired, or another account's sandbox)."""
        try:
            found = self.reservations(ids=[reservation_id])
        except ResourceGone:
            return None
        except RequestRejected as e:
            if e.code == "InvalidCapacityReservationId.NotFound":
                return None
            raise
        return found[0] if found else None

    def create_reservation(self, request: dict) -> Reservation:
        """Idempotent through the request's ClientToken: a retry returns the same reservation."""
        out = call(self._c.create_capacity_reservation, "CreateCapacityReservation",
                   zone=request.get("AvailabilityZone"), **request)
        return _reservation(out["CapacityReservation"])

    def cancel_reservation(self, reservation_id: str) -> bool:
        """True when cancelled now or already gone/ended; Capacity Blocks cannot be cancelled."""
        try:
            out = call(self._c.cancel_capacity_reservation, "CancelCapacityReservation",
                       CapacityReservationId=reservation_id)
        except ResourceGone:
            return True
        return bool(out.get("Return", True))

    def capacity_block_offerings(self, request: dict) -> list[dict]:
        """Every offering, across all pages: the earliest one may be on any page (NextToken, as
        botocore's DescribeCapacityBlockOfferings paginator follows it)."""
        found: list[dict] = []
        token = None
        for _ in range(100):  # bounded: EC2 offers a handful per search
            page = call(self._d.describe_capacity_block_offerings, "DescribeCapacityBlockOfferings",
                        **request, **({"NextToken": token} if token else {}))
            found += page.get("CapacityBlockOfferings", [])
            token = page.get("NextToken")
            if not token:
                break
        return found

    def purchase_capacity_block(self, request: dict) -> Reservation:
        out = call(self._c.purchase_capacity_block, "PurchaseCapacityBlock", attempts=1, **request)
        return _reservation(out["CapacityReservation"])


def _looks_like_id(ref: str, prefix: str) -> bool:
    rest = ref[len(prefix):]
    return ref.startswith(prefix) and len(rest) >= 8 and all(c in "0123456789abcdef" for c in rest)


def _self_all(group_id: str, permissions: list[dict]) -> bool:
    for p in permissions:
        if p.get("IpProtocol") == "-1" and any(
                pair.get("GroupId") == group_id for pair in p.get("UserIdGroupPairs", [])):
            return True
    return False
