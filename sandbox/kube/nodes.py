"""Node objects from the node manager's join records (contract 2), plus the system node.

A record ``<state>/sandbox/joins/<instance_id>.json`` (``name``, ``instance_id``,
``address``, ``labels``, ``taints``, ``allocatable``) is what a booted instance's nodeadm
would register; deleting it (instance terminated) deletes the Node. The built-in
``sandbox-system`` node (127.0.0.10, CPU only, no GPUs) stands in for the managed node group
that runs routers and other CPU pods on a real cluster.
"""

from __future__ import annotations

import hashlib
import json
import sys

from sandbox.kube import errors, resources
from sandbox.kube.api import now_iso

NODES = resources.lookup("", "v1", "nodes")
JOIN_ANNOTATION = "sandbox.pdlift.io/join-record"
RECORD_HASH = "sandbox.pdlift.io/record-hash"
SYSTEM_NODE = "sandbox-system"
# A kubelet reports every hugepage size the CPU supports, "0" for a size the kernel holds no
# preallocated pages of (Kubernetes "Manage HugePages"); a record's allocatable says what its
# node preallocated (sandbox/nodes/profiles.py HUGEPAGES_2MI, node fault hugepages_2mi).
_DEFAULT_ALLOCATABLE = {"cpu": "191450m", "memory": "2000Gi", "pods": "110",
                        "ephemeral-storage": "28Ti", "hugepages-1Gi": "0", "hugepages-2Mi": "0"}
_UNREACHABLE = "node.kubernetes.io/unreachable"


def _taints(raw) -> list[dict]:
    out = []
    for t in raw or []:
        if isinstance(t, str):  # "key=value:Effect", as --register-with-taints takes them
            kv, _, effect = t.partition(":")
            key, _, value = kv.partition("=")
            t = {"key": key, "value": value, "effect": effect}
        if isinstance(t, dict) and t.get("key"):
            out.append({k: v for k, v in t.items() if k in ("key", "value", "effect") and v != ""})
    return out


def _node_info(instance_id: str) -> dict:
    return {"machineID": hashlib.md5(instance_id.encode()).hexdigest(),
            "systemUUID": hashlib.md5(("uuid" + instance_id).encode()).hexdigest(),
            "bootID": hashlib.md5(("boot" + instance_id).encode()).hexdigest(),
            "kernelVersion": "6.1.119-129.201.amzn2023.x86_64", "osImage": "Amazon Linux 2023",
            "containerRuntimeVersion": "containerd://1.7.23", "kubeletVersion": "v1.33.5-eks-sandbox",
            "kubeProxyVersion": "v1.33.5-eks-sandbox", "operatingSystem": "linux",
            "architecture": "amd64"}


def ready_conditions(ready: bool, prev: list | None = None) -> list[dict]:
    now = now_iso()
    prev_by_type = {c["type"]: c for c in prev or []}
    wanted = [("MemoryPressure", "False", "KubeletHasSufficientMemory"),
              ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
              ("PIDPressure", "False", "KubeletHasSufficientPID"),
              ("Ready", "True", "KubeletReady")]
    out = []
    for ctype, status, reason in wanted:
        message = "kubelet is posting ready status" if ctype == "Ready" else reason
        if not ready:
            status, reason, message = "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status."
        old = prev_by_type.get(ctype)
        since = old["lastTransitionTime"] if old and old.get("status") == status else now
        out.append({"type": ctype, "status": status, "reason": reason, "message": message,
                    "lastHeartbeatTime": old.get("lastHeartbeatTime", now) if old else now,
                    "lastTransitionTime": since})
    return out


def build_node(rec: dict) -> dict:
    name, iid, addr = rec["name"], rec.get("instance_id", rec["name"]), rec["address"]
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
              "kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
              "beta.kubernetes.io/arch": "amd64"}
    labels.update({k: str(v) for k, v in (rec.get("labels") or {}).items()})
    alloc = dict(_DEFAULT_ALLOCATABLE)
    alloc.update({k: str(v) for k, v in (rec.get("allocatable") or {}).items()})
    if int(alloc.get("nvidia.com/gpu", "0") or 0) > 0:
        # GPU Feature Discovery's label, which the GPU operator's DaemonSets select on.
        labels.setdefault("nvidia.com/gpu.present", "true")
    zone = labels.get("topology.kubernetes.io/zone", "sandbox-az")
    return {
        "metadata": {"name": name, "labels": labels, "annotations": {
            JOIN_ANNOTATION: iid, RECORD_HASH: hashlib.sha256(
                json.dumps(rec, sort_keys=True).encode()).hexdigest()[:16],
            "alpha.kubernetes.io/provided-node-ip": addr}},
        "spec": {"providerID": f"aws:///{zone}/{iid}", "taints": _taints(rec.get("taints"))},
        "status": {"capacity": dict(alloc), "allocatable": alloc,
                   "addresses": [{"type": "InternalIP", "address": addr},
                                 {"type": "Hostname", "address": name}],
                   "conditions": ready_conditions(True), "nodeInfo": _node_info(iid),
                   "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}},
    }


def node_address(node: dict) -> str | None:
    for a in (node.get("status") or {}).get("addresses") or []:
        if a.get("type") == "InternalIP":
            return a["address"]
    return None


def node_ready(node: dict) -> bool:
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return c.get("status") == "True"
    return False


class NodeSync:
    def __init__(self, app):
        self.app = app
        self._wrong_cluster: set[str] = set()

    def _records(self) -> dict[str, dict]:
        out = {}
        joins = self.app.settings.joins_dir
        for path in sorted(joins.glob("*.json")) if joins.is_dir() else []:
            try:
                rec = json.loads(path.read_text())
            except (OSError, ValueError):
                continue  # being written; the next poll reads it whole
            if not (isinstance(rec, dict) and rec.get("name") and rec.get("address")):
                continue
            cluster = rec.get("cluster")
            if cluster and cluster != self.app.settings.cluster_name:
                # nodeadm pointed at another cluster: this API server never hears of the node.
                if path.name not in self._wrong_cluster:
                    self._wrong_cluster.add(path.name)
                    print(f"kube: {rec['name']} joins cluster {cluster!r}, not "
                          f"{self.app.settings.cluster_name!r}; ignored", file=sys.stderr)
                continue
            out[rec["name"]] = rec
        if self.app.settings.system_node and SYSTEM_NODE not in out:
            out[SYSTEM_NODE] = {
                "name": SYSTEM_NODE, "instance_id": SYSTEM_NODE,
                "address": self.app.settings.system_node_address,
                "labels": {"node.kubernetes.io/instance-type": "m7i.4xlarge",
                           "eks.amazonaws.com/nodegroup": "system",
                           "pdlift.io/sandbox-system": "true"},
                "allocatable": {"cpu": "15890m", "memory": "60Gi", "pods": "110",
                                "ephemeral-storage": "100Gi"}}
        return out

    def sync(self) -> None:
        api, faults = self.app.api, self.app.faults
        wanted = self._records()
        existing = {n["metadata"]["name"]: n for n in api.store.list(NODES)}
        for name, node in existing.items():
            if JOIN_ANNOTATION in node["metadata"].get("annotations", {}) and name not in wanted:
                api.delete(NODES, None, name)
        for name, rec in wanted.items():
            fresh = build_node(rec)
            node = existing.get(name)
            if node is None or node["metadata"]["annotations"].get(RECORD_HASH) != \
                    fresh["metadata"]["annotations"][RECORD_HASH]:
                try:
                    if node is None:
                        node = api.create(NODES, None, fresh, "nodeadm")
                    else:  # the record changed (relabelled): update in place, pods stay
                        def relabel(n, fresh=fresh):
                            n["metadata"]["labels"] = fresh["metadata"]["labels"]
                            n["metadata"].setdefault("annotations", {}).update(
                                fresh["metadata"]["annotations"])
                            n["spec"] = fresh["spec"]
                            fresh["status"]["conditions"] = n["status"].get("conditions")
                            n["status"] = fresh["status"]
                        node = api.mutate(NODES, node, relabel) or node
                except errors.ApiError as e:
                    print(f"kube: join record for {name} refused: {e.message}", file=sys.stderr)
                    continue
            self._set_readiness(node, not faults.node_not_ready(name))

    def _set_readiness(self, node: dict, ready: bool) -> None:
        """What the node lifecycle controller does when a kubelet stops (or resumes) posting."""
        tainted = any(t.get("key") == _UNREACHABLE for t in node["spec"].get("taints") or [])
        if node_ready(node) == ready and tainted != ready:
            return

        def change(n):
            n["status"]["conditions"] = ready_conditions(ready, n["status"].get("conditions"))
            taints = [t for t in n["spec"].get("taints") or [] if t.get("key") != _UNREACHABLE]
            if not ready:
                taints += [{"key": _UNREACHABLE, "effect": "NoSchedule", "timeAdded": now_iso()},
                           {"key": _UNREACHABLE, "effect": "NoExecute", "timeAdded": now_iso()}]
            n["spec"]["taints"] = taints
        self.app.api.mutate(NODES, node, change)
