"""Field defaults the real API server fills in, so stored objects look like a cluster's.

Defaulting must be idempotent (defaulting a defaulted object changes nothing): a repeated
server-side apply relies on it to be a no-op.
"""

from __future__ import annotations

import base64
import ipaddress

PROBE_DEFAULTS = {"timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1,
                  "failureThreshold": 3}


def _default_probe(probe: dict | None) -> None:
    if not isinstance(probe, dict):
        return
    for k, v in PROBE_DEFAULTS.items():
        probe.setdefault(k, v)
    if isinstance(probe.get("httpGet"), dict):
        probe["httpGet"].setdefault("path", "/")
        probe["httpGet"].setdefault("scheme", "HTTP")


def _pull_policy(image: str) -> str:
    tail = image.rsplit("/", 1)[-1]
    if "@" in tail:
        return "IfNotPresent"
    if ":" not in tail or tail.endswith(":latest"):
        return "Always"
    return "IfNotPresent"


def _default_container(c: dict) -> None:
    if isinstance(c.get("image"), str):
        c.setdefault("imagePullPolicy", _pull_policy(c["image"]))
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    c.setdefault("resources", {})
    for p in c.get("ports") or []:
        if isinstance(p, dict):
            p.setdefault("protocol", "TCP")
    res = c["resources"]
    if isinstance(res, dict) and isinstance(res.get("limits"), dict):
        # Requests default to limits, as the API server does.
        req = res.setdefault("requests", {})
        for k, v in res["limits"].items():
            req.setdefault(k, v)
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        _default_probe(c.get(probe))


def default_pod_spec(spec: dict) -> None:
    if not isinstance(spec, dict):
        return
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("enableServiceLinks", True)
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        if isinstance(c, dict):
            _default_container(c)


def default_pod(pod: dict) -> None:
    spec = pod.setdefault("spec", {})
    default_pod_spec(spec)
    # DefaultTolerationSeconds admission: tolerate an unreachable node for 5 minutes.
    tolerations = spec.setdefault("tolerations", [])
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        if not any(t.get("key") == key for t in tolerations if isinstance(t, dict)):
            tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute",
                                "tolerationSeconds": 300})


def _default_template(obj: dict, *path: str) -> None:
    node = obj
    for p in path:
        node = node.get(p) if isinstance(node, dict) else None
    if isinstance(node, dict):
        default_pod_spec(node.setdefault("spec", {}))


class ClusterIPs:
    """Hands out ClusterIPs from 10.100.0.0/16 as EKS's default service CIDR does."""

    def __init__(self):
        self._next = 10

    def allocate(self) -> str:
        self._next += 1
        return str(ipaddress.ip_address("10.100.0.0") + self._next)


def apply_defaults(rt, obj: dict, cluster_ips: ClusterIPs | None = None) -> None:
    kind = rt.kind
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else None
    if kind == "Pod":
        default_pod(obj)
        obj.setdefault("status", {}).setdefault("phase", "Pending")
    elif kind == "Namespace":
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj.setdefault("status", {}).setdefault("phase", "Active")
        labels = obj["metadata"].setdefault("labels", {})
        labels.setdefault("kubernetes.io/metadata.name", obj["metadata"]["name"])
    elif kind == "Service" and spec is not None:
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        spec.setdefault("internalTrafficPolicy", "Cluster")
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        if "clusterIP" not in spec and cluster_ips is not None:
            spec["clusterIP"] = cluster_ips.allocate()
        if "clusterIP" in spec:
            spec.setdefault("clusterIPs", [spec["clusterIP"]])
        for p in spec.get("ports") or []:
            if isinstance(p, dict):
                p.setdefault("protocol", "TCP")
                if "port" in p:
                    p.setdefault("targetPort", p["port"])
        obj.setdefault("status", {}).setdefault("loadBalancer", {})
    elif kind == "Secret":
        obj.setdefault("type", "Opaque")
        string_data = obj.pop("stringData", None)
        if isinstance(string_data, dict):
            data = obj.setdefault("data", {})
            for k, v in string_data.items():
                data[k] = base64.b64encode(str(v).encode()).decode()
    elif kind == "Deployment" and spec is not None:
        spec.setdefault("replicas", 1)
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)
        spec.setdefault("strategy", {"type": "RollingUpdate", "rollingUpdate": {
            "maxSurge": "25%", "maxUnavailable": "25%"}})
        _default_template(obj, "spec", "template")
    elif kind == "StatefulSet" and spec is not None:
        # A fresh StatefulSet reports 0 replicas (clients require the field).
        status = obj.setdefault("status", {})
        status.setdefault("replicas", 0)
        status.setdefault("availableReplicas", 0)
        spec.setdefault("replicas", 1)
        spec.setdefault("podManagementPolicy", "OrderedReady")
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("updateStrategy", {"type": "RollingUpdate",
                                           "rollingUpdate": {"partition": 0}})
        _default_template(obj, "spec", "template")
    elif kind == "LeaderWorkerSet" and spec is not None:
        spec.setdefault("replicas", 1)
        spec.setdefault("startupPolicy", "LeaderCreated")
        spec.setdefault("rolloutStrategy", {"type": "RollingUpdate", "rollingUpdateConfiguration": {
            "maxUnavailable": 1, "maxSurge": 0}})
        spec.setdefault("networkConfig", {"subdomainPolicy": "Shared"})
        lwt = spec.get("leaderWorkerTemplate")
        if isinstance(lwt, dict):
            lwt.setdefault("size", 1)
            lwt.setdefault("restartPolicy", "RecreateGroupOnPodRestart")
            _default_template(spec, "leaderWorkerTemplate", "workerTemplate")
            _default_template(spec, "leaderWorkerTemplate", "leaderTemplate")
