"""Capacity Blocks for ML: DescribeCapacityBlockOfferings and PurchaseCapacityBlock.

Offerings come from ``capacity_blocks`` in the configuration. As on EC2: durations are 1-day
steps up to 14 days then 7-day steps up to 182 days; 1 to 64 instances; every block ends at
11:30 UTC; the fee is paid upfront; a search returns at most 6 offerings, in pages
(NextToken/MaxResults, as botocore's paginator reads them); a purchased block is a Capacity
Reservation with ReservationType ``capacity-block`` that cannot be cancelled. Every offering
starts in the future (``capacity_block_start_seconds`` for the earliest, see config.py): the
bought block is ``payment-pending``, then ``scheduled`` (zero available, launches refused with
InvalidCapacityReservationState.PendingActivation), then ``active`` at its StartDate.
PurchaseCapacityBlock has no ClientToken, so each offering id can be bought only once; a
bought, expired, unknown or malformed offering id gets EC2's InvalidCapacityBlockOfferingId*
codes (EC2 error-code list).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sandbox.aws.config import AwsConfig
from sandbox.aws.render import Ec2Error
from sandbox.aws.reservations import ReservationBook, now

MAX_OFFERINGS = 6
END_OF_BLOCK = dt.time(11, 30, tzinfo=dt.UTC)
OFFERING_ID = re.compile(r"^cb-[0-9a-f]{17}$")
MAX_PAGE = 1000  # DescribeCapacityBlockOfferings MaxResults: 1 to 1000 (API Reference)


@dataclass(frozen=True)
class Offering:
    id: str
    source: int  # index into config.capacity_blocks
    instance_type: str
    zone: str
    count: int
    start: dt.datetime
    end: dt.datetime
    hours: int
    fee: float

    def describe(self) -> dict[str, Any]:
        return {
            "CapacityBlockOfferingId": self.id,
            "InstanceType": self.instance_type,
            "AvailabilityZone": self.zone,
            "InstanceCount": self.count,
            "StartDate": self.start,
            "EndDate": self.end,
            "CapacityBlockDurationHours": self.hours,
            "UpfrontFee": f"{self.fee:.2f}",
            "CurrencyCode": "USD",
            "Tenancy": "default",
        }


def valid_duration(hours: int) -> bool:
    if hours % 24 == 0 and 24 <= hours <= 14 * 24:
        return True
    return hours % (7 * 24) == 0 and 14 * 24 < hours <= 182 * 24


def _whole_second(t: dt.datetime) -> dt.datetime:
    """``t`` rounded up to a whole second (offering ids and starts stay stable within a second)."""
    return dt.datetime.fromtimestamp(math.ceil(t.timestamp()), tz=dt.UTC)


def _read_token(token: str) -> tuple[int, dt.datetime]:
    try:
        offset, searched = token.split(":", 1)
        return int(offset), dt.datetime.fromtimestamp(float(searched), tz=dt.UTC)
    except ValueError:
        # EC2's error-code list: "InvalidPaginationToken: The specified pagination token is not
        # valid or is expired."
        raise Ec2Error("InvalidPaginationToken", "The specified pagination token is not valid "
                       "or is expired.") from None


def _next_end(after: dt.datetime) -> dt.datetime:
    """The first 11:30 UTC at or after ``after``."""
    candidate = dt.datetime.combine(after.astimezone(dt.UTC).date(), END_OF_BLOCK)
    return candidate if candidate >= after else candidate + dt.timedelta(days=1)


def _last_end(before: dt.datetime) -> dt.datetime:
    """The last 11:30 UTC at or before ``before``."""
    candidate = _next_end(before)
    return candidate if candidate == before else candidate - dt.timedelta(days=1)


class CapacityBlocks:
    def __init__(self, config: AwsConfig, reservations: ReservationBook,
                 zone_id: Callable[[str, str], str]) -> None:
        self._config = config
        self._reservations = reservations
        self._zone_id = zone_id
        self._offered: dict[str, Offering] = {}
        self._sold: dict[str, int] = {}  # offering id -> config source it was bought from

    def _remaining(self, source: int) -> int:
        limit = int(self._config.capacity_blocks[source].get("max_instance_count", 0))
        sold = sum(
            self._offered[oid].count
            for oid, src in self._sold.items()
            if src == source and self._offered[oid].end > now()
        )
        return limit - sold

    def describe_offerings(self, region: str, params: dict[str, Any]) -> dict[str, Any]:
        hours = params["CapacityDurationHours"]
        count = params.get("InstanceCount", 1)
        itype = params.get("InstanceType")
        if not itype:
            raise Ec2Error("MissingParameter", "The request must contain the parameter "
                           "InstanceType")
        if not valid_duration(hours):
            raise Ec2Error("InvalidParameterValue", f"CapacityDurationHours {hours} is not "
                           "valid: 24-hour steps up to 336, then 168-hour steps up to 4368.")
        if not 1 <= count <= 64:
            raise Ec2Error("InvalidParameterValue", "InstanceCount must be between 1 and 64.")
        size = params.get("MaxResults", self._config.capacity_block_page_size)
        if not 1 <= size <= MAX_PAGE:
            raise Ec2Error("InvalidParameterValue", f"MaxResults must be between 1 and {MAX_PAGE}")
        # The next page continues the same search: the token carries where it stopped and the
        # moment it was made, so offerings that start "N seconds after the search" stay the same.
        offset, searched = _read_token(params.get("NextToken")) if params.get("NextToken") else (0, now())
        earliest = max(params.get("StartDateRange") or searched, searched)
        latest_end = params.get("EndDateRange")
        found: list[Offering] = []
        for source, entry in enumerate(self._config.capacity_blocks):
            zone = entry["availability_zone"]
            if entry["instance_type"] != itype or not zone.startswith(region):
                continue
            if self._remaining(source) < count:
                continue
            for day in range(MAX_OFFERINGS):
                offering = self._offering(source, entry, count, hours, earliest, day)
                if latest_end is None or offering.end <= latest_end:
                    found.append(offering)
        found.sort(key=lambda o: (o.start, o.zone))
        found = found[:MAX_OFFERINGS]
        out: dict[str, Any] = {"CapacityBlockOfferings": [o.describe() for o in found[offset:offset + size]]}
        if offset + size < len(found):
            out["NextToken"] = f"{offset + size}:{searched.timestamp():.6f}"
        return out

    def _offering(self, source: int, entry: dict[str, Any], count: int, hours: int,
                  earliest: dt.datetime, day: int) -> Offering:
        if day == 0:
            # The earliest offering starts capacity_block_start_seconds after the search (whole
            # seconds), so a purchased block is scheduled, not usable, until then.
            lead = dt.timedelta(seconds=self._config.capacity_block_start_seconds)
            start = _whole_second(earliest + lead)
        else:
            start = _next_end(earliest) + dt.timedelta(days=day - 1)
        # A block that starts off the 11:30 UTC grid still ends at 11:30 UTC, so it runs a little short.
        end = _last_end(start + dt.timedelta(hours=hours))
        if end <= start + dt.timedelta(hours=max(hours - 24, 1)):
            end += dt.timedelta(days=1)
        fee = float(entry.get("hourly_price", 0.0)) * count * hours
        digest = hashlib.sha256(
            f"{source}|{entry['availability_zone']}|{entry['instance_type']}|{count}|"
            f"{start.isoformat()}|{hours}".encode()
        ).hexdigest()
        offering = Offering("cb-" + digest[:17], source, entry["instance_type"],
                            entry["availability_zone"], count, start, end, hours, fee)
        self._offered.setdefault(offering.id, offering)
        return self._offered[offering.id]

    def purchase(self, region: str, params: dict[str, Any]) -> dict[str, Any]:
        oid = params["CapacityBlockOfferingId"]
        # EC2's error-code list: InvalidCapacityBlockOfferingIdMalformed "The Capacity Block
        # offering ID is malformed", ...NotFound "cannot be found for this account",
        # ...Expired "is no longer available".
        if not OFFERING_ID.match(oid or ""):
            raise Ec2Error("InvalidCapacityBlockOfferingIdMalformed",
                           f"The Capacity Block offering ID '{oid}' is malformed.")
        offering = self._offered.get(oid)
        if offering is None or not offering.zone.startswith(region):
            raise Ec2Error("InvalidCapacityBlockOfferingIdNotFound", f"The Capacity Block "
                           f"offering ID '{oid}' cannot be found for this account.")
        if oid in self._sold or offering.start + dt.timedelta(hours=1) < now():
            raise Ec2Error("InvalidCapacityBlockOfferingIdExpired", f"The Capacity Block "
                           f"offering ID '{oid}' is no longer available.")
        if self._remaining(offering.source) < offering.count:
            raise Ec2Error("InsufficientInstanceCapacity", "There is not enough Capacity "
                           f"Block capacity for {offering.instance_type} in {offering.zone}.")
        self._sold[oid] = offering.source
        reservation = self._reservations.add(
            region,
            {"TagSpecifications": params.get("TagSpecifications", [])},
            zone=offering.zone,
            zone_id=self._zone_id(region, offering.zone),
            instance_type=offering.instance_type,
            platform=params["InstancePlatform"],
            total=offering.count,
            match_criteria="targeted",
            end_date_type="limited",
            start=offering.start,
            end=offering.end,
            reservation_type="capacity-block",
            payment_until=now() + dt.timedelta(seconds=self._config.capacity_block_payment_seconds),
        )
        return {"CapacityReservation": reservation.describe()}
