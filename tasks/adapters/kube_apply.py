"""Kubernetes objects for the serving stack: server-side apply, reads of pods, events and logs, deletes.

One narrow interface over the REST API (through the ``ApiClient`` passed in, so the token refresh
of ``tasks.adapters.eks`` applies): plain dicts in, typed records out. Server-side apply runs with
field manager ``pdlift`` and ``force=true``: pdlift owns every field it renders, and a hand edit
of one of them is overwritten on the next deploy, not a conflict that stalls a rollout. Applying
the same object twice changes nothing (the API server keeps its resourceVersion).

Kinds are looked up in a fixed table rather than through discovery: the stack renders six
kinds, and a table costs no extra requests and fails loudly on a kind nobody planned for.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from urllib.parse import quote

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from tasks.adapters.kube_errors import HttpStatus, translate
from tasks.errors import ConfigError, RequestRejected, ResourceGone
from tasks.planning.manifests.common import GPU
from tasks.planning.room import ROLE_LABEL, FleetNode, GpuPod, pod_gpus

FIELD_MANAGER = "pdlift"
TIMEOUT_S = 30

# (apiVersion, kind) -> (path prefix, plural, namespaced)
_KINDS = {
    ("v1", "Namespace"): ("/api/v1", "namespaces", False),
    ("v1", "ServiceAccount"): ("/api/v1", "serviceaccounts", True),
    ("v1", "Service"): ("/api/v1", "services", True),
    ("v1", "ConfigMap"): ("/api/v1", "configmaps", True),
    ("v1", "Secret"): ("/api/v1", "secrets", True),
    ("v1", "Pod"): ("/api/v1", "pods", True),
    ("apps/v1", "Deployment"): ("/apis/apps/v1", "deployments", True),
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"):
        ("/apis/leaderworkerset.x-k8s.io/v1", "leaderworkersets", True),
}


@dataclass(frozen=True)
class Applied:
    kind: str
    namespace: str | None
    name: str
    uid: str
    resource_version: str
    generation: int | None

    @property
    def ref(self) -> str:
        return f"{self.kind} {self.namespace + '/' if self.namespace else ''}{self.name}"


@dataclass(frozen=True)
class ContainerState:
    name: str
    ready: bool
    started: bool
    restarts: int
    waiting_reason: str = ""
    waiting_message: str = ""
    terminated_reason: str = ""  # the current state, else the last one (why it restarted)
    exit_code: int | None = None
    finished_at: str = ""  # when that run ended: tells one crash from the next
    image: str = ""
    image_id: str = ""  # what the kubelet pulled: repo@sha256:<digest> (docker-pullable:// on dockershim)


@dataclass(frozen=True)
class PodInfo:
    namespace: str
    name: str
    node: str
    phase: str
    pod_ip: str
    ready: bool
    labels: dict[str, str]
    ports: dict[str, int]  # container port name -> number, all containers
    containers: tuple[ContainerState, ...]
    unschedulable: str = ""  # the PodScheduled=False message, when the scheduler gave up for now
    deleting: bool = False
    uid: str = ""


@dataclass(frozen=True)
class EventInfo:
    type: str
    reason: str
    message: str
    count: int
    object: str  # Kind/name
    last_seen: str = field(default="")

    def line(self) -> str:
        times = f" (x{self.count})" if self.count > 1 else ""
        return f"{self.last_seen} {self.type} {self.reason} {self.object}: {self.message}{times}"


def resource_path(api_version: str, kind: str, name: str | None = None, namespace: str | None = None) -> str:
    try:
        prefix, plural, namespaced = _KINDS[(api_version, kind)]
    except KeyError:
        raise ConfigError(f"pdlift does not know how to apply {kind} ({api_version}); "
                          f"known kinds: {sorted(k for _, k in _KINDS)}") from None
    path = prefix
    if namespaced:
        if not namespace:
            raise ConfigError(f"{kind} {name} needs a namespace")
        path += f"/namespaces/{quote(namespace)}"
    path += f"/{plural}"
    return path + (f"/{quote(name)}" if name else "")


class KubeApply:
    def __init__(self, api_client: k8s.ApiClient, timeout_s: float = TIMEOUT_S):
        self._api = api_client
        self._timeout = timeout_s

    # --- transport ---------------------------------------------------------------------------

    def _call(self, method: str, path: str, what: str, query: list[tuple[str, str]] | None = None,
              body: object = None, content_type: str | None = None, raw: bool = False):
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        try:
            request = self._api.param_serialize(method, path, query_params=query or [], header_params=headers,
                                                body=body, auth_settings=["BearerToken"])
            response = self._api.call_api(*request, _request_timeout=self._timeout)
            data = response.read()
        except ApiException as e:
            raise translate(e, what) from e
        except (HTTPError, OSError) as e:
            raise translate(e, what) from e
        if not 200 <= response.status <= 299:
            raise translate(HttpStatus(response.status, data), what) from None
        return data.decode(errors="replace") if raw else json.loads(data or b"{}")

    def _get_or_none(self, path: str, what: str, query=None) -> dict | None:
        try:
            return self._call("GET", path, what, query)
        except ResourceGone:
            return None

    # --- writes ------------------------------------------------------------------------------

    def apply(self, obj: dict, dry_run: bool = False) -> Applied:
        """Server-side apply of one object; idempotent (the same object again changes nothing)."""
        meta = obj.get("metadata") or {}
        name, ns = meta.get("name"), meta.get("namespace")
        path = resource_path(obj.get("apiVersion", ""), obj.get("kind", ""), name, ns)
        query = [("fieldManager", FIELD_MANAGER), ("force", "true")]
        if dry_run:
            query.append(("dryRun", "All"))
        out = self._call("PATCH", path, f"apply {obj.get('kind')} {ns + '/' if ns else ''}{name}", query, obj,
                         "application/apply-patch+yaml")
        m = out.get("metadata") or {}
        return Applied(out.get("kind", obj["kind"]), m.get("namespace"), m.get("name", name), m.get("uid", ""),
                       m.get("resourceVersion", ""), m.get("generation"))

    def annotate(self, api_version: str, kind: str, name: str, namespace: str | None,
                 annotations: dict[str, str | None]) -> None:
        """Set (or, with None, remove) annotations by a merge patch."""
        path = resource_path(api_version, kind, name, namespace)
        self._call("PATCH", path, f"annotate {kind} {name}", [("fieldManager", FIELD_MANAGER + "-promotion")],
                   {"metadata": {"annotations": annotations}}, "application/merge-patch+json")

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> bool:
        """Delete (dependents are garbage-collected in the background); False when already gone."""
        path = resource_path(api_version, kind, name, namespace)
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        try:
            self._call("DELETE", path, f"delete {kind} {name}", body=options, content_type="application/json")
        except ResourceGone:
            return False
        return True

    # --- reads -------------------------------------------------------------------------------

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict | None:
        return self._get_or_none(resource_path(api_version, kind, name, namespace), f"read {kind} {name}")

    def pods(self, namespace: str, selector: dict[str, str]) -> list[PodInfo]:
        query = [("labelSelector", ",".join(f"{k}={v}" for k, v in sorted(selector.items())))]
        doc = self._call("GET", resource_path("v1", "Pod", namespace=namespace), f"list pods in {namespace}", query)
        return sorted((_pod(p) for p in doc.get("items") or []), key=lambda p: p.name)

    def fleet_gpus(self, node_selector: dict[str, str]) -> tuple[list[FleetNode], list[GpuPod]]:
        """The nodes matching ``node_selector`` with their allocatable GPUs, and every pod not yet
        finished on them with the GPUs it asked for."""
        query = [("labelSelector", ",".join(f"{k}={v}" for k, v in sorted(node_selector.items())))]
        doc = self._call("GET", "/api/v1/nodes", "list nodes", query)
        nodes = [FleetNode(n["metadata"]["name"], (n["metadata"].get("labels") or {}).get(ROLE_LABEL, ""),
                           int(((n.get("status") or {}).get("allocatable") or {}).get(GPU, 0)))
                 for n in doc.get("items") or []]
        names = {n.name for n in nodes}
        running = [("fieldSelector", "status.phase!=Succeeded,status.phase!=Failed")]
        doc = self._call("GET", "/api/v1/pods", "list pods", running)
        pods = []
        for p in doc.get("items") or []:
            node = (p.get("spec") or {}).get("nodeName") or ""
            if node in names:
                gpus = pod_gpus(p)
                if gpus:
                    pods.append(GpuPod(p["metadata"].get("namespace", ""), p["metadata"]["name"], node, gpus))
        return nodes, pods

    def events(self, namespace: str, object_name: str | None = None) -> list[EventInfo]:
        query = [("fieldSelector", f"involvedObject.name={object_name}")] if object_name else []
        path = f"/api/v1/namespaces/{quote(namespace)}/events"
        doc = self._call("GET", path, f"list events in {namespace}", query)
        items = sorted(doc.get("items") or [], key=_event_order)
        return [_event(e) for e in items]

    def log_tail(self, namespace: str, pod: str, container: str | None = None, lines: int = 40) -> str:
        """The last lines of the container's log; of its previous run when the current one has none
        yet (a crash-looping container between restarts). Empty when there is no log at all."""
        path = resource_path("v1", "Pod", pod, namespace) + "/log"
        base = [("tailLines", str(lines))] + ([("container", container)] if container else [])
        for previous in (False, True):
            query = base + ([("previous", "true")] if previous else [])
            try:
                text = self._call("GET", path, f"read the log of {namespace}/{pod}", query, raw=True)
            except (RequestRejected, ResourceGone):
                continue  # not started yet / no previous run: the API answers 400 (404: the pod is gone)
            if text.strip():
                return text
        return ""


    def log_head(self, namespace: str, pod: str, container: str | None = None, limit_bytes: int = 2 << 20) -> str:
        """The first ``limit_bytes`` of the container's current log (its start-up lines). Empty when
        there is none yet."""
        path = resource_path("v1", "Pod", pod, namespace) + "/log"
        query = [("limitBytes", str(limit_bytes))] + ([("container", container)] if container else [])
        try:
            return self._call("GET", path, f"read the log of {namespace}/{pod}", query, raw=True)
        except (RequestRejected, ResourceGone):
            return ""


def _pod(p: dict) -> PodInfo:
    meta, spec, status = p.get("metadata") or {}, p.get("spec") or {}, p.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    scheduled = conditions.get("PodScheduled") or {}
    unschedulable = scheduled.get("message", "") if scheduled.get("status") == "False" else ""
    ports = {port["name"]: int(port["containerPort"]) for c in spec.get("containers") or []
             for port in c.get("ports") or [] if port.get("name")}
    return PodInfo(meta.get("namespace", ""), meta.get("name", ""), spec.get("nodeName") or "",
                   status.get("phase", ""), status.get("podIP") or "",
                   (conditions.get("Ready") or {}).get("status") == "True", dict(meta.get("labels") or {}),
                   ports, tuple(_container(c) for c in status.get("containerStatuses") or []),
                   unschedulable or "", bool(meta.get("deletionTimestamp")), meta.get("uid", ""))


def _container(c: dict) -> ContainerState:
    state, last = c.get("state") or {}, c.get("lastState") or {}
    waiting = state.get("waiting") or {}
    terminated = state.get("terminated") or last.get("terminated") or {}
    return ContainerState(c.get("name", ""), bool(c.get("ready")), bool(c.get("started")),
                          int(c.get("restartCount") or 0), waiting.get("reason", ""), waiting.get("message", ""),
                          terminated.get("reason", ""), terminated.get("exitCode"),
                          str(terminated.get("finishedAt") or ""), c.get("image", ""), c.get("imageID", ""))


def _event_order(e: dict) -> tuple:
    """Oldest first: by last time seen (seconds), then by resourceVersion (within a second)."""
    rv = str((e.get("metadata") or {}).get("resourceVersion") or "0")
    return (_event_time(e), int(rv) if rv.isdigit() else 0)


def _event_time(e: dict) -> str:
    return str(e.get("lastTimestamp") or e.get("eventTime") or (e.get("metadata") or {}).get("creationTimestamp")
               or "")


def _event(e: dict) -> EventInfo:
    obj = e.get("involvedObject") or {}
    return EventInfo(e.get("type", ""), e.get("reason", ""), e.get("message", ""), int(e.get("count") or 1),
                     f"{obj.get('kind', '?')}/{obj.get('name', '?')}", _event_time(e))
