"""The capacity model: an On-Demand pool per AZ and instance type, and what draws on it.

A live ODCR holds ``TotalInstanceCount`` of its AZ's pool whether used or not (as EC2 bills
it); an instance launched outside any reservation holds one more. Capacity Blocks come from
their own supply (see blocks.py) and do not touch the pool. Launches are planned first
(``plan_launch``: which reservation each instance lands in, or the error EC2 would give), then
committed once moto has created the instances.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sandbox.aws.config import AwsConfig
from sandbox.aws.placement import PlacementGroups
from sandbox.aws.render import Ec2Error
from sandbox.aws.reservations import NOT_STARTED, Reservation, ReservationBook, now


@dataclass(frozen=True)
class LaunchPlan:
    zone: str
    instance_type: str
    count: int
    reservation_id: str | None  # every instance of one launch lands in the same place


class Capacity:
    def __init__(self, config: AwsConfig, reservations: ReservationBook,
                 groups: PlacementGroups, zone_id: Callable[[str, str], str]) -> None:
        self._config = config
        self.reservations = reservations
        self._groups = groups
        self._zone_id = zone_id
        self._slots: dict[str, tuple[str, str, str | None]] = {}  # iid -> (zone, type, cr)

    # ---- the pool -----------------------------------------------------------------------
    def pool_free(self, zone: str, instance_type: str) -> int:
        held = sum(
            r.total
            for r in self.reservations.all()
            if r.zone == zone and r.instance_type == instance_type
            and r.reservation_type == "default" and r.is_live()
        )
        on_demand = sum(
            1
            for z, t, cr in self._slots.values()
            if z == zone and t == instance_type and not self._in_live_reservation(cr)
        )
        return self._config.pool_size(zone, instance_type) - held - on_demand

    def _in_live_reservation(self, reservation_id: str | None) -> bool:
        if reservation_id is None:
            return False
        found = next((r for r in self.reservations.all() if r.id == reservation_id), None)
        return found is not None and found.is_live()

    def _require_offered(self, zone: str, instance_type: str) -> None:
        if zone not in self._config.capacity:
            raise Ec2Error("InvalidParameterValue", f"Invalid availability zone: [{zone}]")
        if self._config.pool_size(zone, instance_type) <= 0:
            raise Ec2Error(
                "Unsupported",
                f"Your requested instance type ({instance_type}) is not supported in your "
                f"requested Availability Zone ({zone}).",
            )

    def _require_free(self, zone: str, instance_type: str, count: int) -> None:
        if self.pool_free(zone, instance_type) < count:
            raise Ec2Error(
                "InsufficientInstanceCapacity",
                f"We currently do not have sufficient {instance_type} capacity in the "
                f"Availability Zone you requested ({zone}). Our system will be working on "
                "provisioning additional capacity.",
            )

    # ---- CreateCapacityReservation ------------------------------------------------------
    def create_reservation(self, region: str, zone: str, params: dict[str, Any]) -> Reservation:
        instance_type = params["InstanceType"]
        count = params["InstanceCount"]
        if count < 1:
            raise Ec2Error("InvalidParameterValue", "InstanceCount must be at least 1")
        self._require_offered(zone, instance_type)
        start = params.get("StartDate")
        # Future-dated ODCRs exist only for C, M, R, I, T and G families.
        future = start is not None and start > now() + dt.timedelta(minutes=5)
        if future and instance_type[:1] not in ("c", "m", "r", "i", "t", "g"):
            raise Ec2Error(
                "InvalidParameterValue",
                f"Future-dated Capacity Reservations are not supported for {instance_type}.",
            )
        end_type = params.get("EndDateType", "unlimited")
        if end_type == "limited" and params.get("EndDate") is None:
            raise Ec2Error("InvalidParameterCombination", "EndDate is required when "
                           "EndDateType is limited")
        # EndDate is "the date and time at which the Capacity Reservation expires" (API
        # Reference, CreateCapacityReservation): one already past cannot be reserved. EC2's
        # error-code list gives InvalidParameterValue for "a value specified in a parameter is
        # not valid"; it does not quote this case's message, so the wording here is ours.
        if end_type == "limited" and params["EndDate"] <= now():
            raise Ec2Error("InvalidParameterValue", "The EndDate "
                           f"{params['EndDate'].isoformat()} is in the past; it must be in the future.")
        arn = params.get("PlacementGroupArn")
        if arn:
            group = self._groups.by_arn(arn)
            if group is None or group.region != region:
                raise Ec2Error("InvalidPlacementGroup.Unknown",
                               f"The Placement Group '{arn}' is unknown.")
            if group.strategy != "cluster":
                raise Ec2Error("InvalidParameterValue",
                               "Only cluster placement groups can be used with a reservation.")
        self._require_free(zone, instance_type, count)
        return self.reservations.add(
            region,
            params,
            zone=zone,
            zone_id=self._zone_id(region, zone),
            instance_type=instance_type,
            platform=params["InstancePlatform"],
            total=count,
            tenancy=params.get("Tenancy", "default"),
            match_criteria=params.get("InstanceMatchCriteria", "open"),
            end_date_type=end_type,
            end=params.get("EndDate"),
            placement_group_arn=arn,
            ebs_optimized=params.get("EbsOptimized", False),
            ephemeral_storage=params.get("EphemeralStorage", False),
            delivery_preference=params.get("DeliveryPreference"),
        )

    # ---- RunInstances / TerminateInstances ----------------------------------------------
    def plan_launch(self, region: str, zone: str, instance_type: str, min_count: int,
                    max_count: int, spec: dict[str, Any], market: str | None) -> LaunchPlan:
        target = spec.get("CapacityReservationTarget", {}).get("CapacityReservationId")
        if target:
            return self._plan_targeted(region, zone, instance_type, min_count, max_count,
                                       target, market)
        if market == "capacity-block":
            raise Ec2Error("InvalidParameterCombination", "A capacity-block launch must target "
                           "a Capacity Block reservation (CapacityReservationTarget).")
        self._require_offered(zone, instance_type)
        preference = spec.get("CapacityReservationPreference", "open")
        if preference in ("open", "capacity-reservations-only"):
            for r in self.reservations.all():
                if (r.region == region and r.zone == zone and r.instance_type == instance_type
                        and r.match_criteria == "open" and r.reservation_type == "default"
                        and r.available() >= min_count):
                    return LaunchPlan(zone, instance_type, min(max_count, r.available()), r.id)
            if preference == "capacity-reservations-only":
                raise Ec2Error("InsufficientInstanceCapacity", "No open Capacity Reservation "
                               f"in {zone} has {min_count} {instance_type} available.")
        free = self.pool_free(zone, instance_type)
        self._require_free(zone, instance_type, min_count)
        return LaunchPlan(zone, instance_type, min(max_count, free), None)

    def _plan_targeted(self, region: str, zone: str, instance_type: str, min_count: int,
                       max_count: int, target: str, market: str | None) -> LaunchPlan:
        r = self.reservations.get(region, target)
        if r.instance_type != instance_type:
            raise Ec2Error("InvalidParameterValue", f"Capacity reservation {r.id} is for "
                           f"{r.instance_type}, not {instance_type}.")
        if r.zone != zone:
            raise Ec2Error("InvalidParameterValue", f"Capacity reservation {r.id} is in "
                           f"{r.zone}; the launch asked for {zone}.")
        if r.reservation_type == "capacity-block" and market != "capacity-block":
            raise Ec2Error("InvalidParameterCombination", "Launching into a Capacity Block "
                           "needs InstanceMarketOptions MarketType=capacity-block.")
        if r.reservation_type == "capacity-block" and r.state() in NOT_STARTED:
            # EC2's error-code list: "InvalidCapacityReservationState.PendingActivation: Your
            # Capacity Block is not active yet."
            raise Ec2Error("InvalidCapacityReservationState.PendingActivation",
                           "Your Capacity Block is not active yet.")
        if r.available() < min_count:
            state = r.state()
            why = "" if state in ("pending", "active") else f" (state: {state})"
            raise Ec2Error(
                "ReservationCapacityExceeded",
                f"The requested reservation {r.id} does not have sufficient compatible and "
                f"available capacity for this request{why}.",
            )
        return LaunchPlan(zone, instance_type, min(max_count, r.available()), r.id)

    def commit(self, plan: LaunchPlan, instance_ids: list[str]) -> None:
        for iid in instance_ids:
            self._slots[iid] = (plan.zone, plan.instance_type, plan.reservation_id)
            if plan.reservation_id:
                self.reservations.get_any(plan.reservation_id).instances.add(iid)

    def release(self, instance_id: str) -> None:
        slot = self._slots.pop(instance_id, None)
        if slot and slot[2]:
            self.reservations.get_any(slot[2]).instances.discard(instance_id)

    def reservation_of(self, instance_id: str) -> str | None:
        slot = self._slots.get(instance_id)
        return slot[2] if slot else None
