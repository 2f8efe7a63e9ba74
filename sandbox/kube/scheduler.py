"""A scheduler with the default scheduler's hard rules (no scoring beyond spreading).

Filters, in the order the real one reports them: node unschedulable, nodeSelector and
required node affinity, taints/tolerations (NoSchedule, NoExecute), resources (every
requested resource against allocatable minus what bound pods request: nvidia.com/gpu,
vpc.amazonaws.com/efa, hugepages-*, cpu, memory, pods), required pod affinity and
anti-affinity by topologyKey (both directions for anti-affinity). A pod no node fits stays
Pending with PodScheduled=False and a FailedScheduling event saying why, per node count.
"""

from __future__ import annotations

import re
from collections import Counter

from sandbox.kube import resources
from sandbox.kube.api import now_iso
from sandbox.kube.nodes import node_ready
from sandbox.kube.selectors import LabelSelector, Requirement

PODS = resources.lookup("", "v1", "pods")
NODES = resources.lookup("", "v1", "nodes")
_SUFFIX = {"": 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_QTY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")


def quantity(value) -> float:
    if isinstance(value, (int, float)):
        return float(value)
    m = _QTY.match(str(value).strip())
    if not m or m.group(2) not in _SUFFIX:
        return 0.0
    return float(m.group(1)) * _SUFFIX[m.group(2)]


def pod_requests(pod: dict) -> Counter:
    spec = pod.get("spec") or {}
    total: Counter = Counter()
    for c in spec.get("containers") or []:
        res = c.get("resources") or {}
        for k, v in (res.get("requests") or res.get("limits") or {}).items():
            total[k] += quantity(v)
    for c in spec.get("initContainers") or []:
        res = c.get("resources") or {}
        for k, v in (res.get("requests") or res.get("limits") or {}).items():
            total[k] = max(total[k], quantity(v))
    total["pods"] += 1
    return total


def tolerates(tolerations: list, taint: dict) -> bool:
    for t in tolerations or []:
        if t.get("effect") and t["effect"] != taint.get("effect"):
            continue
        if not t.get("key") and t.get("operator") == "Exists":
            return True
        if t.get("key") != taint.get("key"):
            continue
        if t.get("operator") == "Exists" or t.get("value", "") == taint.get("value", ""):
            return True
    return False


def _node_selector_term(term: dict, node: dict) -> bool:
    labels = node["metadata"].get("labels") or {}
    for e in term.get("matchExpressions") or []:
        if not Requirement(e["key"], e["operator"], tuple(e.get("values") or ())).matches(labels):
            return False
    for e in term.get("matchFields") or []:
        fields = {"metadata.name": node["metadata"]["name"]}
        if not Requirement(e["key"], e["operator"], tuple(e.get("values") or ())).matches(fields):
            return False
    return True


def matches_node(pod: dict, node: dict) -> bool:
    spec = pod.get("spec") or {}
    labels = node["metadata"].get("labels") or {}
    if not LabelSelector.from_map(spec.get("nodeSelector")).matches(labels):
        return False
    req = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution")
    if req:
        return any(_node_selector_term(t, node) for t in req.get("nodeSelectorTerms") or [])
    return True


def _term_selects(term: dict, term_ns: str, other: dict) -> bool:
    namespaces = term.get("namespaces") or []
    other_ns = other["metadata"].get("namespace")
    if term.get("namespaceSelector") == {}:
        pass  # every namespace
    elif namespaces and other_ns not in namespaces:
        return False
    elif not namespaces and other_ns != term_ns:
        return False
    return LabelSelector.from_object(term.get("labelSelector"), empty_matches_all=True) \
        .matches(other["metadata"].get("labels"))


def _required_terms(pod: dict, kind: str) -> list[dict]:
    aff = ((pod.get("spec") or {}).get("affinity") or {}).get(kind) or {}
    return aff.get("requiredDuringSchedulingIgnoredDuringExecution") or []


def _ports(pod: dict) -> set[tuple[int, str]]:
    return {(int(p["containerPort"]), p.get("protocol", "TCP"))
            for c in (pod.get("spec") or {}).get("containers") or [] for p in c.get("ports") or []
            if p.get("containerPort")}


def _topology(node: dict | None, key: str):
    return ((node or {}).get("metadata", {}).get("labels") or {}).get(key)


class Scheduler:
    def __init__(self, app):
        self.app = app

    def _inter_pod(self, pod, node, placed: list[tuple[dict, dict]]) -> str | None:
        ns = pod["metadata"]["namespace"]
        for term in _required_terms(pod, "podAffinity"):
            key = term.get("topologyKey", "")
            matching = [(p, n) for p, n in placed if _term_selects(term, ns, p)]
            if not matching and _term_selects(term, ns, pod) and _topology(node, key) is not None:
                continue  # the first pod of a group may start the domain
            if _topology(node, key) is None or not any(
                    _topology(n, key) == _topology(node, key) for _, n in matching):
                return "node(s) didn't match pod affinity rules"
        for term in _required_terms(pod, "podAntiAffinity"):
            key = term.get("topologyKey", "")
            value = _topology(node, key)
            if value is not None and any(_topology(n, key) == value and _term_selects(term, ns, p)
                                         for p, n in placed):
                return "node(s) didn't match pod anti-affinity rules"
        for other, other_node in placed:  # existing pods' anti-affinity applies to us too
            for term in _required_terms(other, "podAntiAffinity"):
                key = term.get("topologyKey", "")
                value = _topology(node, key)
                if value is not None and _topology(other_node, key) == value and \
                        _term_selects(term, other["metadata"]["namespace"], pod):
                    return "node(s) didn't match pod anti-affinity rules"
        return None

    def _why_not(self, pod, node, used: Counter, placed) -> str | None:
        if (node.get("spec") or {}).get("unschedulable"):
            return "node(s) were unschedulable"
        # Pods here listen on their node's address (no pod network), so every container port is
        # a host port: two pods that listen on the same port cannot share a node (the real
        # scheduler's NodePorts filter, and its message).
        mine = _ports(pod)
        if mine and any(mine & _ports(p) for p, n in placed if n is node):
            return "node(s) didn't have free ports for the requested pod ports"
        if not matches_node(pod, node):
            return "node(s) didn't match Pod's node affinity/selector"
        for taint in (node.get("spec") or {}).get("taints") or []:
            if taint.get("effect") in ("NoSchedule", "NoExecute") and \
                    not tolerates((pod.get("spec") or {}).get("tolerations"), taint):
                return ("node(s) had untolerated taint {%s: %s}"
                        % (taint["key"], taint.get("value", "")))
        alloc = (node.get("status") or {}).get("allocatable") or {}
        for res, amount in sorted(pod_requests(pod).items()):
            if amount <= 0:
                continue
            if res not in alloc and res in ("cpu", "memory", "ephemeral-storage"):
                continue
            if used[res] + amount > quantity(alloc.get(res, 0)) + 1e-9:
                return f"Insufficient {res}"
        return self._inter_pod(pod, node, placed)

    def sync(self) -> None:
        api = self.app.api
        # read only (Store.view): a binding or a condition is written to a fresh copy (_bind, _unschedulable)
        nodes = {n["metadata"]["name"]: n for n in api.store.view(NODES)}
        pods = api.store.view(PODS)
        usage: dict[str, Counter] = {name: Counter() for name in nodes}
        placed: list[tuple[dict, dict]] = []
        pending = []
        for p in pods:
            node_name = (p.get("spec") or {}).get("nodeName")
            if not node_name:
                pending.append(p)
            elif node_name in nodes and (p.get("status") or {}).get("phase") not in (
                    "Succeeded", "Failed"):
                usage[node_name] += pod_requests(p)
                placed.append((p, nodes[node_name]))
        pending.sort(key=lambda p: (p["metadata"].get("creationTimestamp", ""),
                                    p["metadata"]["name"]))
        for pod in pending:
            reasons: Counter = Counter()
            fits = []
            for name, node in nodes.items():
                why = self._why_not(pod, node, usage[name], placed)
                if why is None and not node_ready(node):
                    why = "node(s) had untolerated taint {node.kubernetes.io/not-ready: }"
                if why is None:
                    fits.append(name)
                else:
                    reasons[why] += 1
            if fits:
                best = min(fits, key=lambda n: (usage[n]["pods"], n))
                self._bind(pod, nodes[best])
                usage[best] += pod_requests(pod)
                placed.append((pod, nodes[best]))
            else:
                self._unschedulable(pod, len(nodes), reasons)

    def _bind(self, pod: dict, node: dict) -> None:
        api = self.app.api
        with api.store.lock:
            current = api.store.get(PODS, pod["metadata"]["namespace"], pod["metadata"]["name"])
            if current is None or current["metadata"]["uid"] != pod["metadata"]["uid"]:
                return
            current["spec"]["nodeName"] = node["metadata"]["name"]
            status = current.setdefault("status", {})
            status["conditions"] = [c for c in status.get("conditions") or []
                                    if c.get("type") != "PodScheduled"] + [
                {"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                 "lastTransitionTime": now_iso()}]
            api.store.update(PODS, current)
        self.app.recorder.record(pod, "Normal", "Scheduled",
                                 f"Successfully assigned {pod['metadata']['namespace']}/"
                                 f"{pod['metadata']['name']} to {node['metadata']['name']}",
                                 component="default-scheduler")

    def _unschedulable(self, pod: dict, total: int, reasons: Counter) -> None:
        if total == 0:
            message = "no nodes available to schedule pods"
        else:
            detail = ", ".join(f"{n} {why}" for why, n in sorted(reasons.items()))
            message = (f"0/{total} nodes are available: {detail}. preemption: 0/{total} nodes are "
                       f"available: {total} Preemption is not helpful for scheduling.")
        status = dict(pod.get("status") or {})
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        old = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), None)
        if old and old.get("message") == message:
            return  # nothing new to say; keeps resourceVersion still
        conditions.append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                           "message": message, "lastProbeTime": None,
                           "lastTransitionTime": now_iso()})
        status["conditions"] = conditions
        status["phase"] = "Pending"
        self.app.api.write_status(PODS, pod, status)
        self.app.recorder.record(pod, "Warning", "FailedScheduling", message,
                                 component="default-scheduler", min_interval=10.0)
