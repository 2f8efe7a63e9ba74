"""What pdlift knows about GPU instance types and their prices, with sources.

Pure data. A blueprint can override the hourly price (``aws.hourly_price_usd``); the plan
always prints which figure it used and where it came from.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class InstanceType:
    name: str
    gpus: int
    gpu_model: str
    gpu_memory_gb: float       # per GPU, as the vendor states it (GB = 1e9 bytes)
    vcpus: int
    efa_devices: int
    efa_gbps_total: float      # line rate over all EFA devices
    nvme_tb: float


@dataclass(frozen=True)
class Price:
    usd_per_hour: float
    source: str
    as_of: str


INSTANCE_TYPES: dict[str, InstanceType] = {
    # docs/sources.md#p5en-shape: 8 x H200 141 GB, 192 vCPU, 16 EFA (3.2 Tbps), 8 x 3.84 TB NVMe
    "p5en.48xlarge": InstanceType("p5en.48xlarge", 8, "H200", 141.0, 192, 16, 3200.0, 30.72),
    "p5e.48xlarge": InstanceType("p5e.48xlarge", 8, "H200", 141.0, 192, 32, 3200.0, 30.72),
    "p5.48xlarge": InstanceType("p5.48xlarge", 8, "H100", 80.0, 192, 32, 3200.0, 30.72),
}

_P5EN_SOURCE = "dstack PR #4110 `dstack offer` output (docs/sources.md#p5en-price)"
PRICES: dict[tuple[str, str], Price] = {
    ("p5en.48xlarge", "us-east-1"): Price(63.296, _P5EN_SOURCE, "2026-08"),
    ("p5en.48xlarge", "us-east-2"): Price(63.296, _P5EN_SOURCE, "2026-08"),
    ("p5en.48xlarge", "us-west-2"): Price(63.296, _P5EN_SOURCE, "2026-08"),
    ("p5en.48xlarge", "eu-north-1"): Price(67.73, _P5EN_SOURCE, "2026-08"),
    ("p5en.48xlarge", "us-west-1"): Price(79.12, _P5EN_SOURCE, "2026-08"),
}


def instance_type(name: str) -> InstanceType | None:
    return INSTANCE_TYPES.get(name)


def price(instance: str, region: str, override: float | None = None) -> Price | None:
    """The hourly on-demand price, the blueprint's override winning over the table."""
    if override is not None:
        return Price(override, "blueprint aws.hourly_price_usd", "blueprint")
    return PRICES.get((instance, region))
