"""Instance topology: three network-node layers per instance (four on p6-b200/p6-b300),
deterministic, so that "which nodes are closest" has one answer.

Layer 1 (top) is shared by every instance in an AZ; layer 2 by the instances of one placement
group (or, without a group, of one RunInstances call); the bottom layer (the node that touches
the instance) by consecutive instances of that group in launch order, ``pair_size`` at a time;
on four-layer types layer 3 sits between, shared by the group as layer 2 is.
Node ids are hashes of account, AZ and group, like EC2's per-account hashed ids.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Any

from sandbox.aws.filters import matches, page
from sandbox.aws.render import Ec2Error

# EC2 user guide, "Prerequisites for Amazon EC2 topology": p6-b200 and p6-b300 return 4 network
# nodes; the other supported types (p5, p5e, p5en, ...) return 3.
FOUR_LAYER_TYPES = frozenset({"p6-b200.48xlarge", "p6-b300.48xlarge"})


@dataclass
class Placed:
    """What DescribeInstanceTopology reports for one instance."""

    instance_id: str
    instance_type: str
    zone: str
    zone_id: str
    group_name: str | None
    network_nodes: list[str]
    launched_at: float = field(default_factory=time.monotonic)


class Topology:
    def __init__(self, account_id: str, pair_size: int) -> None:
        self._account_id = account_id
        self._pair_size = max(int(pair_size), 1)
        self._launched: dict[tuple[str, str], int] = {}  # (zone, group key) -> count so far

    def _node(self, *parts: object) -> str:
        text = "|".join(str(p) for p in (self._account_id, *parts))
        return "nn-" + hashlib.sha256(text.encode()).hexdigest()[:17]

    def assign(self, zone: str, group_key: str, instance_type: str = "") -> list[str]:
        """Network nodes, top-down, for the next instance launched in ``group_key``."""
        index = self._launched.get((zone, group_key), 0)
        self._launched[(zone, group_key)] = index + 1
        four = instance_type in FOUR_LAYER_TYPES
        return [
            self._node("layer1", zone),
            self._node("layer2", zone, group_key),
            *([self._node("layer3", zone, group_key)] if four else []),
            self._node("layer4" if four else "layer3", zone, group_key, index // self._pair_size),
        ]


def describe(placed: list[Placed], params: dict[str, Any], empty_seconds: float) -> dict[str, Any]:
    """The DescribeInstanceTopology answer over the running instances in ``placed``."""
    ids = params.get("InstanceIds", [])
    if ids and params.get("MaxResults") is not None:
        raise Ec2Error("InvalidParameterCombination",
                       "MaxResults cannot be combined with InstanceIds.")
    if len(ids) > 100 or len(params.get("GroupNames", [])) > 100:
        raise Ec2Error("InvalidParameterValue", "At most 100 InstanceIds or GroupNames.")
    chosen = [p for p in placed if not ids or p.instance_id in ids]
    if params.get("GroupNames"):
        chosen = [p for p in chosen if p.group_name in params["GroupNames"]]
    filters = params.get("Filters", [])
    chosen = [p for p in chosen if matches(filters, _fields(p), [])]
    items, token = page(chosen, params.get("NextToken"), params.get("MaxResults"), 20, 100)
    settled = time.monotonic() - empty_seconds
    out: dict[str, Any] = {"Instances": [_entry(p, p.launched_at <= settled) for p in items]}
    if token:
        out["NextToken"] = token
    return out


def _entry(p: Placed, settled: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "InstanceId": p.instance_id,
        "InstanceType": p.instance_type,
        # Right after launch EC2 may answer without nodes (eventual consistency).
        "NetworkNodes": list(p.network_nodes) if settled else [],
        "AvailabilityZone": p.zone,
        "ZoneId": p.zone_id,
    }
    if p.group_name:
        entry["GroupName"] = p.group_name
    return entry


def _fields(p: Placed):  # type: ignore[no-untyped-def]
    return {
        "availability-zone": [p.zone],
        "instance-type": [p.instance_type],
        "zone-id": [p.zone_id],
    }.get
