"""The AWS endpoint's configuration: capacity per AZ and instance type, offerings, timings.

Read from a YAML file (safe_load) whose keys all have defaults, for example::

    region: us-east-2
    capacity:                    # On-Demand pool per AZ and instance type
      us-east-2a: {p5en.48xlarge: 8}
      us-east-2b: {p5en.48xlarge: 8}
    default_capacity: 16         # for instance types a listed AZ does not name (0: Unsupported)
    capacity_blocks:             # what DescribeCapacityBlockOfferings can offer
      - {instance_type: p5en.48xlarge, availability_zone: us-east-2a,
         max_instance_count: 8, hourly_price: 41.61}
    reservation_pending_seconds: 1.0   # a new ODCR shows pending this long (still usable)
    capacity_block_start_seconds: 60.0 # the earliest offering starts this long after the search
    capacity_block_payment_seconds: 1.0  # a bought block is payment-pending this long
    capacity_block_page_size: 2        # offerings per DescribeCapacityBlockOfferings page
    topology_empty_seconds: 0.0        # DescribeInstanceTopology has no NetworkNodes this long
    topology_pair_size: 2              # instances per layer-3 node, by launch order
    vcpu_quotas: {L-417A185B: 1536}    # On-Demand vCPU quota overrides (quotas.py)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

DEFAULT_REGION = "us-east-2"
DEFAULT_TYPES = {"p5en.48xlarge": 8, "p5e.48xlarge": 8, "p5.48xlarge": 8}


def _default_capacity() -> dict[str, dict[str, int]]:
    return {f"{DEFAULT_REGION}{z}": dict(DEFAULT_TYPES) for z in "abc"}


def _default_blocks() -> list[dict[str, Any]]:
    return [
        {
            "instance_type": "p5en.48xlarge",
            "availability_zone": f"{DEFAULT_REGION}{z}",
            "max_instance_count": 8,
            # USD per instance-hour; p5en has no public CB price, this is the p5e row.
            "hourly_price": 43.26,
        }
        for z in "ab"
    ]


@dataclass(frozen=True)
class AwsConfig:
    region: str = DEFAULT_REGION
    account_id: str = "123456789012"
    capacity: dict[str, dict[str, int]] = field(default_factory=_default_capacity)
    default_capacity: int = 16
    capacity_blocks: list[dict[str, Any]] = field(default_factory=_default_blocks)
    reservation_pending_seconds: float = 1.0
    # A Capacity Block is sold for a start in the future and is unusable until then (EC2 User
    # Guide, "Capacity Blocks for ML": blocks are reserved up to 8 weeks ahead; "View Capacity
    # Blocks": payment-pending, scheduled, active, expired). Real offerings start at 11:30 UTC,
    # hours or days away; the sandbox's earliest one starts this many seconds after the search
    # (later ones at the following 11:30 UTCs), so a demo or a test waits seconds, not hours.
    capacity_block_start_seconds: float = 60.0
    capacity_block_payment_seconds: float = 1.0
    # DescribeCapacityBlockOfferings pages with NextToken/MaxResults (botocore's EC2 paginator);
    # EC2 documents no default page size, so the sandbox's is small: a client that reads only the
    # first page misses offerings, as it can on EC2.
    capacity_block_page_size: int = 2
    topology_empty_seconds: float = 0.0
    topology_pair_size: int = 2
    vcpu_quotas: dict[str, int] = field(default_factory=dict)  # overrides, by quota code

    def zones(self) -> list[str]:
        return sorted(self.capacity)

    def pool_size(self, zone: str, instance_type: str) -> int:
        if zone not in self.capacity:
            return 0
        return int(self.capacity[zone].get(instance_type, self.default_capacity))


def load_config(path: str | Path | None) -> AwsConfig:
    if path is None:
        return AwsConfig()
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: the sandbox AWS configuration must be a mapping")
    known = set(AwsConfig.__dataclass_fields__)
    unknown = set(data) - known
    if unknown:
        raise ValueError(f"{path}: unknown keys {sorted(unknown)}; known: {sorted(known)}")
    return AwsConfig(**data)
