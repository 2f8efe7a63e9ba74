"""Controllers for Deployments, StatefulSets, DaemonSets and Service endpoints, and garbage collection.

Simplifications (documented in the package note): a Deployment owns its pods directly (no
ReplicaSet objects; pods are still named ``<deployment>-<template hash>-<suffix>`` and carry
``pod-template-hash``) and replaces all outdated pods at once; a StatefulSet replaces
outdated pods at once too. Both report status the way `kubectl rollout status` reads it.
A DaemonSet keeps one pod on every node its template's node selector, affinity and tolerations
allow, pinned there the way the real controller does it (a required node affinity on the
node's ``metadata.name``, then the scheduler binds it), and replaces outdated pods at once.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time

from sandbox.kube import errors, resources
from sandbox.kube.api import random_suffix
from sandbox.kube.scheduler import matches_node, tolerates
from sandbox.kube.store import clone

PODS = resources.lookup("", "v1", "pods")
SERVICES = resources.lookup("", "v1", "services")
ENDPOINTS = resources.lookup("", "v1", "endpoints")
DEPLOYMENTS = resources.lookup("apps", "v1", "deployments")
STATEFULSETS = resources.lookup("apps", "v1", "statefulsets")
DAEMONSETS = resources.lookup("apps", "v1", "daemonsets")
NODES = resources.lookup("", "v1", "nodes")
NAMESPACES = resources.lookup("", "v1", "namespaces")
_HASH_CHARS = "bcdfghjklmnpqrstvwxz2456789"
_ENDPOINTS_MARK = "endpoints.kubernetes.io/last-change-trigger-time"


def template_hash(template: dict, n: int = 10) -> str:
    digest = int(hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest(), 16)
    out = ""
    for _ in range(n):
        digest, r = divmod(digest, len(_HASH_CHARS))
        out += _HASH_CHARS[r]
    return out


def owner_ref(owner: dict) -> dict:
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"],
            "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
            "controller": True, "blockOwnerDeletion": True}


def owned_by(objs: list[dict], owner: dict) -> list[dict]:
    uid = owner["metadata"]["uid"]
    return [o for o in objs if any(r.get("uid") == uid
                                   for r in o["metadata"].get("ownerReferences") or [])]


def pod_ready(pod: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def pod_from_template(template: dict, owner: dict, name: str, labels: dict | None = None,
                      annotations: dict | None = None) -> dict:
    template = clone(template or {})
    meta = template.get("metadata") or {}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": owner["metadata"]["namespace"],
        "labels": {**(meta.get("labels") or {}), **(labels or {})},
        "annotations": {**(meta.get("annotations") or {}), **(annotations or {})},
        "ownerReferences": [owner_ref(owner)]}, "spec": template.get("spec") or {}}
    if not pod["metadata"]["annotations"]:
        del pod["metadata"]["annotations"]
    return pod


class Workloads:
    def __init__(self, app):
        self.app = app
        self._terminating: dict[str, float] = {}

    def _create_pod(self, owner: dict, pod: dict) -> None:
        try:
            self.app.api.create(PODS, pod["metadata"]["namespace"], pod, "kube-controller-manager")
        except errors.ApiError as e:
            self.app.recorder.record(owner, "Warning", "FailedCreate",
                                     f"Error creating: {e.message}",
                                     component="controllermanager", min_interval=30)

    def _delete(self, rt, obj: dict) -> None:
        try:
            self.app.api.delete(rt, obj["metadata"].get("namespace"), obj["metadata"]["name"])
        except errors.ApiError:
            pass  # already gone

    def sync(self, pods: list[dict]) -> None:
        for d in self.app.api.store.list(DEPLOYMENTS):
            self._deployment(d, owned_by(pods, d))
        for s in self.app.api.store.list(STATEFULSETS):
            self._statefulset(s, owned_by(pods, s))
        daemonsets = self.app.api.store.list(DAEMONSETS)
        nodes = self.app.api.store.list(NODES) if daemonsets else []
        for ds in daemonsets:
            self._daemonset(ds, owned_by(pods, ds), nodes)

    def _deployment(self, d: dict, pods: list[dict]) -> None:
        spec = d["spec"]
        h = template_hash(spec.get("template"))
        current = [p for p in pods if p["metadata"]["labels"].get("pod-template-hash") == h]
        for p in pods:
            if p not in current:
                self._delete(PODS, p)
        want = spec.get("replicas", 1)
        for _ in range(want - len(current)):
            name = f"{d['metadata']['name']}-{h}-{random_suffix()}"
            self._create_pod(d, pod_from_template(spec.get("template"), d, name,
                                                  {"pod-template-hash": h}))
        extra = sorted(current, key=lambda p: (pod_ready(p), p["metadata"]["creationTimestamp"]))
        for p in extra[:max(0, len(current) - want)]:
            self._delete(PODS, p)
        current = current[:want] if len(current) > want else current
        ready = sum(1 for p in current if pod_ready(p))
        available = ready >= want
        status = {"observedGeneration": d["metadata"].get("generation", 1),
                  "replicas": len(current), "updatedReplicas": len(current),
                  "readyReplicas": ready, "availableReplicas": ready,
                  "conditions": _conditions(d.get("status"), [
                      ("Available", available, "MinimumReplicasAvailable" if available
                       else "MinimumReplicasUnavailable",
                       "Deployment has minimum availability." if available
                       else "Deployment does not have minimum availability."),
                      ("Progressing", True, "NewReplicaSetAvailable" if available
                       else "ReplicaSetUpdated",
                       f'ReplicaSet "{d["metadata"]["name"]}-{h}" '
                       f'{"has successfully progressed" if available else "is progressing"}.')])}
        if want - ready > 0:
            status["unavailableReplicas"] = want - ready
        for k in ("readyReplicas", "availableReplicas", "updatedReplicas", "replicas"):
            if not status[k]:
                del status[k]  # the real controller omits zero counts
        self.app.api.write_status(DEPLOYMENTS, d, status)

    def _statefulset(self, s: dict, pods: list[dict]) -> None:
        spec, name = s["spec"], s["metadata"]["name"]
        rev = f"{name}-{template_hash(spec.get('template'))}"
        start = (spec.get("ordinals") or {}).get("start", 0)
        want = [f"{name}-{i}" for i in range(start, start + spec.get("replicas", 1))]
        by_name = {p["metadata"]["name"]: p for p in pods}
        for pname, p in by_name.items():
            if pname not in want or p["metadata"]["labels"].get("controller-revision-hash") != rev:
                self._delete(PODS, p)
        by_name = {n: p for n, p in by_name.items()
                   if n in want and p["metadata"]["labels"].get("controller-revision-hash") == rev}
        ordered = spec.get("podManagementPolicy", "OrderedReady") == "OrderedReady"
        for pname in want:
            if pname in by_name:
                if ordered and not pod_ready(by_name[pname]):
                    break  # OrderedReady: the next ordinal waits for this one to be Ready
                continue
            pod = pod_from_template(spec.get("template"), s, pname, {
                "statefulset.kubernetes.io/pod-name": pname, "controller-revision-hash": rev,
                "apps.kubernetes.io/pod-index": pname.rsplit("-", 1)[1]})
            pod["spec"]["hostname"] = pname
            if spec.get("serviceName"):
                pod["spec"]["subdomain"] = spec["serviceName"]
            self._create_pod(s, pod)
            if ordered:
                break
        ready = sum(1 for p in by_name.values() if pod_ready(p))
        status = {"observedGeneration": s["metadata"].get("generation", 1),
                  "replicas": len(by_name), "readyReplicas": ready, "currentReplicas": len(by_name),
                  "updatedReplicas": len(by_name), "availableReplicas": ready,
                  "currentRevision": rev, "updateRevision": rev, "collisionCount": 0}
        self.app.api.write_status(STATEFULSETS, s, status)

    def _daemonset(self, ds: dict, pods: list[dict], nodes: list[dict]) -> None:
        spec, name = ds["spec"], ds["metadata"]["name"]
        h = template_hash(spec.get("template"))
        probe = pod_from_template(spec.get("template"), ds, "probe")
        wanted = {n["metadata"]["name"] for n in nodes if _daemon_runs_on(probe, n)}
        current: dict[str, dict] = {}
        for p in pods:
            node = _pinned_node(p)
            if p["metadata"]["labels"].get("controller-revision-hash") != h or node not in wanted or node in current:
                self._delete(PODS, p)
            else:
                current[node] = p
        for node in sorted(wanted - set(current)):
            pod = pod_from_template(spec.get("template"), ds, f"{name}-{random_suffix()}",
                                    {"controller-revision-hash": h,
                                     "pod-template-generation": str(ds["metadata"].get("generation", 1))})
            _pin(pod, node)
            self._create_pod(ds, pod)
        ready = sum(1 for p in current.values() if pod_ready(p))
        status = {"observedGeneration": ds["metadata"].get("generation", 1),
                  "desiredNumberScheduled": len(wanted), "currentNumberScheduled": len(current),
                  "updatedNumberScheduled": len(current), "numberReady": ready, "numberAvailable": ready,
                  "numberMisscheduled": 0}
        if len(wanted) - ready:
            status["numberUnavailable"] = len(wanted) - ready
        self.app.api.write_status(DAEMONSETS, ds, status)

    # --- endpoints -----------------------------------------------------------------------

    def sync_endpoints(self, pods: list[dict]) -> None:
        store = self.app.api.store
        services = store.view(SERVICES)  # read only (Store.view)
        live = {(s["metadata"]["namespace"], s["metadata"]["name"]) for s in services
                if (s.get("spec") or {}).get("selector")}
        for ep in store.view(ENDPOINTS):
            key = (ep["metadata"]["namespace"], ep["metadata"]["name"])
            if _ENDPOINTS_MARK in (ep["metadata"].get("annotations") or {}) and key not in live:
                self._delete(ENDPOINTS, ep)
        for svc in services:
            selector = (svc.get("spec") or {}).get("selector")
            if selector:
                self._endpoints(svc, selector, pods)

    def _endpoints(self, svc: dict, selector: dict, pods: list[dict]) -> None:
        ns, name = svc["metadata"]["namespace"], svc["metadata"]["name"]
        chosen = [p for p in pods if p["metadata"]["namespace"] == ns
                  and all(p["metadata"].get("labels", {}).get(k) == v for k, v in selector.items())
                  and (p.get("status") or {}).get("podIP")]
        publish_all = (svc.get("spec") or {}).get("publishNotReadyAddresses")
        ready, not_ready = [], []
        for p in sorted(chosen, key=lambda p: p["metadata"]["name"]):
            addr = {"ip": p["status"]["podIP"], "nodeName": p["spec"].get("nodeName"),
                    "targetRef": {"kind": "Pod", "namespace": ns, "name": p["metadata"]["name"],
                                  "uid": p["metadata"]["uid"]}}
            if p["spec"].get("hostname"):
                addr["hostname"] = p["spec"]["hostname"]
            (ready if pod_ready(p) or publish_all else not_ready).append(addr)
        ports = []
        for sp in (svc.get("spec") or {}).get("ports") or []:
            target = sp.get("targetPort", sp.get("port"))
            if isinstance(target, str):
                target = next((cp.get("containerPort") for p in chosen
                               for c in p["spec"].get("containers") or []
                               for cp in c.get("ports") or [] if cp.get("name") == target), None)
            if target:
                port = {"port": target, "protocol": sp.get("protocol", "TCP")}
                if sp.get("name"):
                    port["name"] = sp["name"]
                ports.append(port)
        subset = {}
        if ready:
            subset["addresses"] = ready
        if not_ready:
            subset["notReadyAddresses"] = not_ready
        subsets = [dict(subset, ports=ports) if ports else subset] if subset else []
        store = self.app.api.store
        current = store.get(ENDPOINTS, ns, name)
        if current is None:
            body = {"metadata": {"name": name, "namespace": ns,
                                 "labels": dict(svc["metadata"].get("labels") or {}),
                                 "annotations": {_ENDPOINTS_MARK: svc["metadata"]["creationTimestamp"]}},
                    "subsets": subsets}
            try:
                self.app.api.create(ENDPOINTS, ns, body, "endpoint-controller")
            except errors.ApiError as e:
                print(f"kube: endpoints {ns}/{name}: {e.message}", file=sys.stderr)
        elif current.get("subsets", []) != subsets:
            self.app.api.mutate(ENDPOINTS, current, lambda ep: ep.__setitem__("subsets", subsets))

    # --- garbage collection --------------------------------------------------------------

    def collect_garbage(self) -> None:
        """Empty terminating namespaces; delete objects whose owners are gone, and pods
        bound to nodes that are gone."""
        store = self.app.api.store
        for ns in store.view(NAMESPACES):  # read only (Store.view)
            if ns["metadata"].get("deletionTimestamp"):
                # Like the namespace controller, take a moment: `kubectl delete -f` of a
                # namespace and its contents finds the contents still there.
                seen = self._terminating.setdefault(ns["metadata"]["uid"], time.monotonic())
                if time.monotonic() - seen >= 1.0:
                    self.app.api.finalize_namespace(ns["metadata"]["name"])
                    del self._terminating[ns["metadata"]["uid"]]
        everything = [(rt, o) for rt in resources.RESOURCES for o in store.view(rt)]
        uids = {o["metadata"]["uid"] for _, o in everything}
        nodes = {o["metadata"]["name"] for rt, o in everything if rt is NODES}
        for rt, o in everything:
            refs = o["metadata"].get("ownerReferences") or []
            if refs and not any(r.get("uid") in uids for r in refs):
                self._delete(rt, o)
            elif rt is PODS and o["spec"].get("nodeName") and o["spec"]["nodeName"] not in nodes:
                self._delete(rt, o)


# The real DaemonSet controller adds these to every daemon pod (pkg/controller/daemon/util).
_DAEMON_TOLERATIONS = [{"key": k, "operator": "Exists", "effect": e} for k, e in (
    ("node.kubernetes.io/not-ready", "NoExecute"), ("node.kubernetes.io/unreachable", "NoExecute"),
    ("node.kubernetes.io/disk-pressure", "NoSchedule"), ("node.kubernetes.io/memory-pressure", "NoSchedule"),
    ("node.kubernetes.io/pid-pressure", "NoSchedule"), ("node.kubernetes.io/unschedulable", "NoSchedule"))]


def _daemon_runs_on(pod: dict, node: dict) -> bool:
    tolerations = ((pod.get("spec") or {}).get("tolerations") or []) + _DAEMON_TOLERATIONS
    return matches_node(pod, node) and all(
        tolerates(tolerations, t) for t in (node.get("spec") or {}).get("taints") or []
        if t.get("effect") in ("NoSchedule", "NoExecute"))


def _pin(pod: dict, node: str) -> None:
    spec = pod["spec"]
    spec["tolerations"] = (spec.get("tolerations") or []) + _DAEMON_TOLERATIONS
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    affinity = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": [term]}


def _pinned_node(pod: dict) -> str | None:
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return spec["nodeName"]
    req = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or {}
    for term in req.get("nodeSelectorTerms") or []:
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and field.get("values"):
                return field["values"][0]
    return None


def _conditions(prev_status: dict | None, wanted: list[tuple]) -> list[dict]:
    from sandbox.kube.api import now_iso

    prev = {c["type"]: c for c in (prev_status or {}).get("conditions") or []}
    out = []
    for ctype, ok, reason, message in wanted:
        status = "True" if ok else "False"
        old = prev.get(ctype)
        if old and old.get("status") == status and old.get("reason") == reason:
            out.append(old)
            continue
        now = now_iso()
        out.append({"type": ctype, "status": status, "reason": reason, "message": message,
                    "lastUpdateTime": now, "lastTransitionTime": now})
    return out
