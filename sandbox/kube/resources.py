"""The resource types the Kubernetes stand-in serves, and the discovery documents for them.

One table (``RESOURCES``) drives routing, discovery, OpenAPI and the printers, so a type is
added in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
SERVER_VERSION = {
    "major": "1", "minor": "33", "gitVersion": "v1.33.5-eks-sandbox",
    "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
    "buildDate": "2025-01-01T00:00:00Z", "goVersion": "go1.24.6", "compiler": "gc",
    "platform": "linux/amd64",
}


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    has_status: bool = False
    subresources: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    # Workloads count spec changes in metadata.generation; plain data objects do not.
    generation: bool = False
    verbs: tuple[str, ...] = field(default=tuple(VERBS))

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def qualified(self) -> str:
        """How error messages name the resource: ``pods``, ``deployments.apps``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def key(self) -> str:
        return f"{self.group}/{self.plural}"

    @property
    def list_kind(self) -> str:
        return self.kind + "List"


def _r(group, version, plural, kind, namespaced, short=(), status=False, subs=(), cats=(),
       generation=False, verbs=tuple(VERBS)):
    return ResourceType(group, version, plural, kind, namespaced, tuple(short), status,
                        tuple(subs), tuple(cats), generation, tuple(verbs))


LWS_GROUP = "leaderworkerset.x-k8s.io"

RESOURCES: list[ResourceType] = [
    _r("", "v1", "namespaces", "Namespace", False, ["ns"], status=True),
    _r("", "v1", "nodes", "Node", False, ["no"], status=True),
    _r("", "v1", "pods", "Pod", True, ["po"], status=True, subs=["log"], cats=["all"]),
    _r("", "v1", "services", "Service", True, ["svc"], status=True, cats=["all"]),
    _r("", "v1", "endpoints", "Endpoints", True, ["ep"]),
    _r("", "v1", "configmaps", "ConfigMap", True, ["cm"]),
    _r("", "v1", "secrets", "Secret", True),
    _r("", "v1", "serviceaccounts", "ServiceAccount", True, ["sa"]),
    _r("", "v1", "events", "Event", True, ["ev"]),
    _r("apps", "v1", "deployments", "Deployment", True, ["deploy"], status=True,
       cats=["all"], generation=True),
    _r("apps", "v1", "statefulsets", "StatefulSet", True, ["sts"], status=True,
       cats=["all"], generation=True),
    _r("apps", "v1", "daemonsets", "DaemonSet", True, ["ds"], status=True,
       cats=["all"], generation=True),
    _r(LWS_GROUP, "v1", "leaderworkersets", "LeaderWorkerSet", True, ["lws"], status=True,
       cats=["all"], generation=True),
    # Read-only: lets product code check that the LWS CRD is installed, as on EKS.
    _r("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition",
       False, ["crd", "crds"], status=True, verbs=("get", "list", "watch")),
]

BY_PATH: dict[tuple[str, str, str], ResourceType] = {
    (r.group, r.version, r.plural): r for r in RESOURCES}
BY_KIND: dict[tuple[str, str], ResourceType] = {(r.api_version, r.kind): r for r in RESOURCES}
BY_KEY: dict[str, ResourceType] = {r.key: r for r in RESOURCES}


def lws_crd() -> dict:
    """The LeaderWorkerSet CRD as the LWS Helm chart installs it (served, established)."""
    names = {"kind": "LeaderWorkerSet", "listKind": "LeaderWorkerSetList",
             "plural": "leaderworkersets", "singular": "leaderworkerset", "shortNames": ["lws"]}
    return {"metadata": {"name": f"leaderworkersets.{LWS_GROUP}"},
            "spec": {"group": LWS_GROUP, "names": names, "scope": "Namespaced",
                     "versions": [{"name": "v1", "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": {
                                       "type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                                   "subresources": {"status": {}}}]},
            "status": {"acceptedNames": names, "storedVersions": ["v1"], "conditions": [
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                 "message": "the initial names have been accepted"}]}}


def gpu_operator_objects() -> list[tuple[str, dict]]:
    """What the NVIDIA GPU operator runs for GPU telemetry, as on a cluster that has it: the
    DCGM exporter's DaemonSet on every GPU node and its Service (names, labels, port and env
    from the operator's state-dcgm-exporter assets; docs/sources.md#dcgm-exporter). The
    container runs ``dcgm-exporter``, which the sandbox's engines package stands in for.
    (plural, body) pairs, in creation order."""
    labels = {"app": "nvidia-dcgm-exporter"}
    container = {
        "name": "nvidia-dcgm-exporter", "image": "nvcr.io/nvidia/k8s/dcgm-exporter@sha256:" + "4d1e" * 16,   # pinned, as the operator's are
        "command": ["dcgm-exporter"], "args": ["-f", "/etc/dcgm-exporter/dcp-metrics-included.csv", "-c", "1000"],
        "env": [{"name": "DCGM_EXPORTER_LISTEN", "value": ":9400"},
                {"name": "DCGM_EXPORTER_KUBERNETES", "value": "true"},
                {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "ports": [{"name": "metrics", "containerPort": 9400}],
        "readinessProbe": {"httpGet": {"path": "/health", "port": 9400}, "periodSeconds": 1}}
    return [
        ("namespaces", {"metadata": {"name": "gpu-operator"}}),
        ("daemonsets", {"metadata": {"name": "nvidia-dcgm-exporter", "namespace": "gpu-operator", "labels": labels},
                        "spec": {"selector": {"matchLabels": labels}, "template": {
                            "metadata": {"labels": labels},
                            "spec": {"nodeSelector": {"nvidia.com/gpu.present": "true"},
                                     "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                                      "effect": "NoSchedule"}],
                                     "containers": [container]}}}}),
        ("services", {"metadata": {"name": "nvidia-dcgm-exporter", "namespace": "gpu-operator", "labels": labels},
                      "spec": {"selector": labels,
                               "ports": [{"name": "gpu-metrics", "port": 9400, "targetPort": 9400}]}}),
    ]


def lookup(group: str, version: str, plural: str) -> ResourceType | None:
    return BY_PATH.get((group, version, plural))


def of_kind(api_version: str, kind: str) -> ResourceType:
    return BY_KIND[(api_version, kind)]


def group_versions() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for r in RESOURCES:
        if r.group:
            versions = out.setdefault(r.group, [])
            if r.version not in versions:
                versions.append(r.version)
    return out


# --- discovery documents (the legacy, unaggregated form every client understands) ---------

def api_versions(server_address: str) -> dict:
    return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
        {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]}


def _group_doc(group: str, versions: list[str]) -> dict:
    gvs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": gvs, "preferredVersion": gvs[0]}


def api_group_list() -> dict:
    return {"kind": "APIGroupList", "apiVersion": "v1",
            "groups": [_group_doc(g, vs) for g, vs in group_versions().items()]}


def api_group(group: str) -> dict | None:
    versions = group_versions().get(group)
    if not versions:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_doc(group, versions)}


def api_resource_list(group: str, version: str) -> dict | None:
    types = [r for r in RESOURCES if r.group == group and r.version == version]
    if not types:
        return None
    entries = []
    for r in types:
        entry = {"name": r.plural, "singularName": r.singular, "namespaced": r.namespaced,
                 "kind": r.kind, "verbs": list(r.verbs)}
        if r.short_names:
            entry["shortNames"] = list(r.short_names)
        if r.categories:
            entry["categories"] = list(r.categories)
        entries.append(entry)
        if r.has_status:
            entries.append({"name": f"{r.plural}/status", "singularName": "",
                            "namespaced": r.namespaced, "kind": r.kind,
                            "verbs": ["get", "patch", "update"]})
        for sub in r.subresources:
            entries.append({"name": f"{r.plural}/{sub}", "singularName": "",
                            "namespaced": r.namespaced, "kind": r.kind, "verbs": ["get"]})
    return {"kind": "APIResourceList", "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version, "resources": entries}
