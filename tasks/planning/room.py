"""Is there room on the fleet for the candidate colour beside the live one? Pure.

Every engine pod asks for GPUs on a node of its role (``pdlift.io/role`` in its nodeSelector).
The candidate fits when, per role, the GPUs still free on that role's nodes hold all of its pods.
Pods of the candidate's own namespace do not count as taken: applying replaces them. Asking
before applying anything turns a rollout that could never schedule into a clear failure
instead of Pending pods and a FailedScheduling wait.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from tasks.planning.manifests.common import GPU

ROLE_LABEL = "pdlift.io/role"


@dataclass(frozen=True)
class FleetNode:
    name: str
    role: str
    gpus: int  # allocatable


@dataclass(frozen=True)
class GpuPod:
    namespace: str
    name: str
    node: str
    gpus: int


@dataclass(frozen=True)
class Need:
    role: str
    pods: int
    gpus_per_pod: int


def pod_gpus(pod_or_template: dict) -> int:
    """GPUs a pod (or a pod template) asks for, summed over its containers."""
    containers = (pod_or_template.get("spec") or {}).get("containers") or []
    return sum(int(((c.get("resources") or {}).get("requests") or {}).get(GPU, 0)) for c in containers)


def needs(objects: list[dict]) -> list[Need]:
    """The GPU pods the rendered LeaderWorkerSets will ask for, per role and pod size."""
    count: dict[tuple[str, int], int] = defaultdict(int)
    for obj in objects:
        if obj.get("kind") != "LeaderWorkerSet":
            continue
        spec = obj["spec"]
        lwt = spec["leaderWorkerTemplate"]
        groups, size = spec.get("replicas", 1), lwt.get("size", 1)
        leader = lwt.get("leaderTemplate") or lwt["workerTemplate"]
        for template, pods in ((leader, groups), (lwt["workerTemplate"], groups * (size - 1))):
            role = ((template.get("spec") or {}).get("nodeSelector") or {}).get(ROLE_LABEL, "")
            gpus = pod_gpus(template)
            if pods and gpus:
                count[(role, gpus)] += pods
    return [Need(role, pods, gpus) for (role, gpus), pods in sorted(count.items())]


def shortfalls(wanted: list[Need], nodes: list[FleetNode], pods: list[GpuPod], own_namespace: str) -> list[str]:
    """One line per role the candidate does not fit, naming what holds the GPUs; empty if it fits."""
    used: dict[str, int] = defaultdict(int)
    holders: dict[str, list[str]] = defaultdict(list)
    for p in pods:
        if p.namespace != own_namespace and p.node:
            used[p.node] += p.gpus
            holders[p.node].append(f"{p.namespace}/{p.name}")
    out = []
    for need in wanted:
        mine = [n for n in nodes if n.role == need.role]
        fits = sum(max(n.gpus - used[n.name], 0) // need.gpus_per_pod for n in mine)
        if fits >= need.pods:
            continue
        busy = "; ".join(f"{n.name}: {used[n.name]} of {n.gpus} GPUs held by {', '.join(holders[n.name][:3])}"
                         for n in mine if used[n.name]) or "no node holds any"
        out.append(f"{need.role}: {need.pods} pod(s) of {need.gpus_per_pod} GPUs wanted, room for {fits} on "
                   f"{len(mine)} {need.role} node(s) ({busy})")
    return out
