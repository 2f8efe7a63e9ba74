"""Where production traffic goes: the production Service, its endpoints, and the colours behind it.

A narrow interface over the Kubernetes API for the promote and rollback steps. Writes go through
``KubeApply`` (server-side apply, field manager ``pdlift``, ``force``), so switching the
production Service is one idempotent apply of the rendered object: applying the same colour
twice changes nothing. Endpoints are read from the core ``Endpoints`` object the endpoint
controller maintains (served by every Kubernetes version pdlift targets, and by the sandbox);
its addresses are pod IPs, which a worker inside the VPC reaches directly, unlike a ClusterIP.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from tasks.adapters.kube_apply import Applied, KubeApply
from tasks.adapters.kube_errors import translate
from tasks.errors import ResourceGone

TIMEOUT_S = 30


@dataclass(frozen=True)
class Endpoint:
    address: str
    port: int
    pod: str          # the target pod's name ("" when the endpoint names none)
    ready: bool

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}"


class ServiceRouting:
    def __init__(self, api_client: k8s.ApiClient, kube: KubeApply | None = None):
        self._kube = kube or KubeApply(api_client)
        self._core = k8s.CoreV1Api(api_client)

    @property
    def kube(self) -> KubeApply:
        return self._kube

    def apply(self, obj: dict) -> Applied:
        """Server-side apply of one object (idempotent)."""
        return self._kube.apply(obj)

    def selector(self, namespace: str, name: str) -> dict[str, str] | None:
        """The Service's selector; None when the Service does not exist."""
        svc = self._kube.get("v1", "Service", name, namespace)
        return None if svc is None else dict((svc.get("spec") or {}).get("selector") or {})

    def pod_labels(self, namespace: str, pod: str) -> dict[str, str]:
        obj = self._kube.get("v1", "Pod", pod, namespace) if pod else None
        return dict(((obj or {}).get("metadata") or {}).get("labels") or {})

    def endpoints(self, namespace: str, service: str, port_name: str = "http") -> list[Endpoint]:
        """Every address of the Service's endpoints (ready or not); empty when there are none yet."""
        what = f"read the endpoints of Service {namespace}/{service}"
        try:
            ep = self._core.read_namespaced_endpoints(service, namespace, _request_timeout=TIMEOUT_S)
        except (ApiException, HTTPError, OSError) as e:
            error = translate(e, what)
            if isinstance(error, ResourceGone):
                return []
            raise error from e
        out = []
        for subset in ep.subsets or []:
            ports = subset.ports or []
            port = next((p.port for p in ports if p.name == port_name), ports[0].port if ports else None)
            if port is None:
                continue
            for ready, addresses in ((True, subset.addresses), (False, subset.not_ready_addresses)):
                for a in addresses or []:
                    out.append(Endpoint(a.ip, int(port), a.target_ref.name if a.target_ref else "", ready))
        return out

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> bool:
        """Delete one object; False when it was already gone (so a second rollback is a no-op)."""
        return self._kube.delete(api_version, kind, name, namespace)

    def annotations(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, str]:
        obj = self._kube.get(api_version, kind, name, namespace) or {}
        return dict((obj.get("metadata") or {}).get("annotations") or {})

    def annotate(self, api_version: str, kind: str, name: str, namespace: str | None,
                 annotations: dict[str, str | None]) -> None:
        self._kube.annotate(api_version, kind, name, namespace, annotations)

    def presence(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> str:
        """``absent``, ``terminating`` (deleted, finalizers still running) or ``present``."""
        obj = self._kube.get(api_version, kind, name, namespace)
        if obj is None:
            return "absent"
        return "terminating" if (obj.get("metadata") or {}).get("deletionTimestamp") else "present"
