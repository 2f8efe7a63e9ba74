"""Network topology: which nodes are closest, labels to expect, and who serves which role. Pure.

DescribeInstanceTopology lists NetworkNodes top-down; the last one touches the instance, so two
instances sharing it are nearest (docs/sources.md#instance-topology). EKS labels
`topology.k8s.aws/network-node-layer-(i+1)` = NetworkNodes[i].
"""

from __future__ import annotations

from dataclasses import dataclass

LAYER_LABEL = "topology.k8s.aws/network-node-layer-{}"
ROLE_LABEL = "pdlift.io/role"

# How many network nodes DescribeInstanceTopology returns per instance type, so the layer of the
# node that touches the instance: the EC2 user guide's "Prerequisites for Amazon EC2 topology",
# instance types (ec2-instance-topology-prerequisites.html; docs/sources.md#instance-topology).
NETWORK_NODE_LAYERS = {
    **dict.fromkeys(("p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge",
                     "p6e-gb200.36xlarge", "trn2.48xlarge", "trn2u.48xlarge"), 3),
    **dict.fromkeys(("p6-b200.48xlarge", "p6-b300.48xlarge"), 4),
}
# "EC2 instances connect into the network at or below the third layer": three is the floor.
DEFAULT_LAYERS = 3


@dataclass(frozen=True)
class RoleAssignment:
    prefill: tuple[str, ...]
    decode: tuple[str, ...]
    shared_layer: int  # deepest layer the prefill nodes share (3 = same bottom node), 0 = none

    def role_of(self, instance_id: str) -> str:
        return "prefill" if instance_id in self.prefill else "decode"


def bottom_layer(instance_type: str) -> int:
    """The layer whose network node touches an instance of this type (two instances that share
    it are nearest)."""
    return NETWORK_NODE_LAYERS.get(instance_type, DEFAULT_LAYERS)


def expected_labels(network_nodes: list[str]) -> dict[str, str]:
    return {LAYER_LABEL.format(i + 1): node for i, node in enumerate(network_nodes)}


def label_patch(current: dict[str, str], network_nodes: list[str], role: str) -> dict[str, str]:
    """The labels a node is missing or has wrong; empty when it is already right."""
    want = {**expected_labels(network_nodes), ROLE_LABEL: role}
    return {k: v for k, v in want.items() if current.get(k) != v}


def assign_roles(topology: dict[str, list[str]], prefill_nodes: int) -> RoleAssignment:
    """Put the prefill nodes (pipeline parallel: most traffic between them) under the closest
    shared network node; the rest decode. Deterministic for a given topology."""
    ids = sorted(topology)
    if prefill_nodes > len(ids):
        raise ValueError(f"need {prefill_nodes} prefill nodes, have {len(ids)} instances")
    depth = max((len(v) for v in topology.values()), default=0)
    for level in range(depth, 0, -1):
        groups: dict[tuple[str, ...], list[str]] = {}
        for iid in ids:
            nodes = topology[iid]
            if len(nodes) >= level:
                groups.setdefault(tuple(nodes[:level]), []).append(iid)
        candidates = sorted((g for g in groups.values() if len(g) >= prefill_nodes),
                            key=lambda g: g[0])
        if candidates:
            chosen = tuple(candidates[0][:prefill_nodes])
            return RoleAssignment(chosen, tuple(i for i in ids if i not in chosen), level)
    chosen = tuple(ids[:prefill_nodes])
    return RoleAssignment(chosen, tuple(ids[prefill_nodes:]), 0)
