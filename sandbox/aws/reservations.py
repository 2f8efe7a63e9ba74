"""Capacity Reservations (ODCRs and purchased Capacity Blocks) and their life cycle.

State follows EC2: a new ODCR is ``pending`` for ``reservation_pending_seconds`` (already
usable, as EC2 documents) then ``active``; a Capacity Block is ``payment-pending`` for
``capacity_block_payment_seconds`` ("the upfront payment has not been processed yet"), then
``scheduled`` until its start, ``active`` until its end, then ``expired`` (EC2 User Guide, "View
Capacity Blocks"; the CapacityReservation.State values of the EC2 API Reference);
CancelCapacityReservation makes an ODCR ``cancelled`` (Capacity Blocks cannot be cancelled).
``AvailableInstanceCount`` is the total minus the instances running in it: launches take slots,
terminations give them back; "before a Capacity Block reservation begins, the available
capacity appears as zero" (User Guide, "View Capacity Blocks").
"""

from __future__ import annotations

import datetime as dt
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sandbox.aws.filters import matches, page, tags_for
from sandbox.aws.render import Ec2Error

LIVE_STATES = ("pending", "active")
NOT_STARTED = ("payment-pending", "scheduled")  # a Capacity Block bought but not begun
ID_PATTERN = re.compile(r"^cr-[0-9a-f]{17}$")


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass
class Reservation:
    id: str
    region: str
    account_id: str
    zone: str
    zone_id: str
    instance_type: str
    platform: str
    total: int
    created: dt.datetime
    pending_until: dt.datetime
    tenancy: str = "default"
    match_criteria: str = "open"
    end_date_type: str = "unlimited"
    start: dt.datetime | None = None
    end: dt.datetime | None = None
    reservation_type: str = "default"
    placement_group_arn: str | None = None
    tags: list[dict[str, str]] = field(default_factory=list)
    ebs_optimized: bool = False
    ephemeral_storage: bool = False
    delivery_preference: str | None = None
    cancelled: bool = False
    instances: set[str] = field(default_factory=set)
    payment_until: dt.datetime | None = None  # Capacity Blocks: payment-pending until then

    @property
    def arn(self) -> str:
        return f"arn:aws:ec2:{self.region}:{self.account_id}:capacity-reservation/{self.id}"

    def state(self, at: dt.datetime | None = None) -> str:
        at = at or now()
        if self.cancelled:
            return "cancelled"
        if self.end is not None and at >= self.end:
            return "expired"
        if self.payment_until is not None and at < self.payment_until:
            return "payment-pending"
        if self.start is not None and at < self.start:
            return "scheduled"
        if self.reservation_type == "default" and at < self.pending_until:
            return "pending"
        return "active"

    def is_live(self) -> bool:
        return self.state() in LIVE_STATES

    def available(self) -> int:
        return max(self.total - len(self.instances), 0) if self.is_live() else 0

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "CapacityReservationId": self.id,
            "OwnerId": self.account_id,
            "CapacityReservationArn": self.arn,
            "AvailabilityZoneId": self.zone_id,
            "InstanceType": self.instance_type,
            "InstancePlatform": self.platform,
            "AvailabilityZone": self.zone,
            "Tenancy": self.tenancy,
            "TotalInstanceCount": self.total,
            "AvailableInstanceCount": self.available(),
            "EbsOptimized": self.ebs_optimized,
            "EphemeralStorage": self.ephemeral_storage,
            "State": self.state(),
            "StartDate": self.start or self.created,
            "EndDate": self.end,
            "EndDateType": self.end_date_type,
            "InstanceMatchCriteria": self.match_criteria,
            "CreateDate": self.created,
            "Tags": self.tags,
            "PlacementGroupArn": self.placement_group_arn,
            "ReservationType": self.reservation_type,
            "DeliveryPreference": self.delivery_preference,
        }
        return {k: v for k, v in out.items() if v is not None}


# Request members that do not make two CreateCapacityReservation calls "different": the
# token itself, DryRun, and (as EC2 documents) the Availability Zone.
_NOT_COMPARED = {"ClientToken", "DryRun", "AvailabilityZone", "AvailabilityZoneId"}


class ReservationBook:
    def __init__(self, account_id: str, pending_seconds: float) -> None:
        self._account_id = account_id
        self._pending = dt.timedelta(seconds=pending_seconds)
        self._by_id: dict[str, Reservation] = {}
        self._tokens: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}

    def all(self) -> list[Reservation]:
        return list(self._by_id.values())

    def get(self, region: str, reservation_id: str) -> Reservation:
        if not ID_PATTERN.match(reservation_id or ""):
            raise Ec2Error(
                "InvalidCapacityReservationId.Malformed",
                f"Invalid id: \"{reservation_id}\" (expecting \"cr-...\")",
            )
        found = self._by_id.get(reservation_id)
        if found is None or found.region != region:
            raise Ec2Error(
                "InvalidCapacityReservationId.NotFound",
                f"The capacity reservation ID '{reservation_id}' does not exist",
            )
        return found

    def get_any(self, reservation_id: str) -> Reservation:
        return self._by_id[reservation_id]

    def replay(self, region: str, params: dict[str, Any]) -> Reservation | None:
        """The reservation an earlier call with this ClientToken made, if any.

        Same token, different parameters (other than the AZ): IdempotentParameterMismatch.
        """
        token = params.get("ClientToken")
        if not token or (region, token) not in self._tokens:
            return None
        reservation_id, original = self._tokens[(region, token)]
        if _compared(params) != original:
            raise Ec2Error(
                "IdempotentParameterMismatch",
                f"The client token '{token}' has already been used with different parameters.",
            )
        return self._by_id[reservation_id]

    def add(self, region: str, params: dict[str, Any], **fields: Any) -> Reservation:
        created = now()
        reservation = Reservation(
            id="cr-" + secrets.token_hex(9)[:17],
            region=region,
            account_id=self._account_id,
            created=created,
            pending_until=created + self._pending,
            tags=tags_for(params.get("TagSpecifications", []), "capacity-reservation"),
            **fields,
        )
        self._by_id[reservation.id] = reservation
        if params.get("ClientToken"):
            self._tokens[(region, params["ClientToken"])] = (reservation.id, _compared(params))
        return reservation

    def describe(self, region: str, params: dict[str, Any]) -> dict[str, Any]:
        ids = params.get("CapacityReservationIds", [])
        chosen = [self.get(region, i) for i in ids] if ids else [
            r for r in self._by_id.values() if r.region == region
        ]
        filters = params.get("Filters", [])
        chosen = [r for r in chosen if matches(filters, _fields(r), r.tags)]
        items, token = page(chosen, params.get("NextToken"), params.get("MaxResults"), 1000, 1000)
        out: dict[str, Any] = {"CapacityReservations": [r.describe() for r in items]}
        if token:
            out["NextToken"] = token
        return out

    def cancel(self, region: str, params: dict[str, Any]) -> dict[str, Any]:
        reservation = self.get(region, params["CapacityReservationId"])
        if reservation.reservation_type == "capacity-block":
            raise Ec2Error(
                "UnsupportedOperation",
                f"Capacity Block {reservation.id} cannot be cancelled or modified.",
            )
        state = reservation.state()
        if state not in LIVE_STATES:
            raise Ec2Error(
                "IncorrectState",
                f"The capacity reservation '{reservation.id}' is in state '{state}' and cannot "
                "be cancelled.",
            )
        reservation.cancelled = True
        # Running instances keep running, now as On-Demand instances outside the reservation.
        reservation.instances.clear()
        return {"Return": True}


def _compared(params: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in params.items() if k not in _NOT_COMPARED}


def _fields(r: Reservation) -> Callable[[str], list[str] | None]:
    values = {
        "instance-type": [r.instance_type],
        "owner-id": [r.account_id],
        "availability-zone": [r.zone],
        "availability-zone-id": [r.zone_id],
        "instance-platform": [r.platform],
        "tenancy": [r.tenancy],
        "state": [r.state()],
        "end-date-type": [r.end_date_type],
        "instance-match-criteria": [r.match_criteria],
        "placement-group-arn": [r.placement_group_arn] if r.placement_group_arn else [],
        "reservation-type": [r.reservation_type],
    }
    return values.get
