"""Kubernetes nodes and namespaces: the join check, labels, and namespace cleanup."""

from __future__ import annotations

from dataclasses import dataclass

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from tasks.adapters.kube_errors import translate
from tasks.errors import ResourceGone


@dataclass(frozen=True)
class NodeRecord:
    name: str
    instance_id: str
    labels: dict[str, str]
    ready: bool
    allocatable: dict[str, str]
    # The node's InternalIP (status.addresses): where its sshd answers on a cluster pdlift did
    # not launch. Empty when the kubelet did not report one.
    address: str = ""


def instance_id_of(provider_id: str) -> str:
    """`aws:///us-east-2a/i-0abc` -> `i-0abc`."""
    return provider_id.rsplit("/", 1)[-1] if provider_id else ""


class KubeNodes:
    def __init__(self, api_client: k8s.ApiClient):
        self._core = k8s.CoreV1Api(api_client)

    def nodes(self, label_selector: str = "") -> list[NodeRecord]:
        try:
            items = self._core.list_node(label_selector=label_selector, _request_timeout=30).items
        except (ApiException, HTTPError, OSError) as e:
            raise translate(e, "list nodes") from e
        return [_record(n) for n in items]

    def patch_labels(self, name: str, labels: dict[str, str]) -> None:
        try:
            self._core.patch_node(name, {"metadata": {"labels": labels}}, _request_timeout=30)
        except (ApiException, HTTPError, OSError) as e:
            raise translate(e, f"label node {name}") from e

    def namespaces(self, label_selector: str) -> list[str]:
        """The matching namespaces that are not being deleted: a deleted namespace stays listed,
        Terminating, until the namespace controller has emptied it, and is released already."""
        try:
            items = self._core.list_namespace(label_selector=label_selector, _request_timeout=30).items
        except (ApiException, HTTPError, OSError) as e:
            raise translate(e, "list namespaces") from e
        return [n.metadata.name for n in items if not n.metadata.deletion_timestamp]

    def delete_namespace(self, name: str) -> None:
        """Deleting an absent namespace returns silently."""
        try:
            self._core.delete_namespace(name, _request_timeout=30)
        except (ApiException, HTTPError, OSError) as e:
            error = translate(e, f"delete namespace {name}")
            if isinstance(error, ResourceGone):
                return
            raise error from e


def _record(n) -> NodeRecord:
    conditions = {c.type: c.status for c in (n.status.conditions or [])}
    return NodeRecord(
        name=n.metadata.name,
        instance_id=instance_id_of(n.spec.provider_id or "") if n.spec else "",
        labels=dict(n.metadata.labels or {}),
        ready=conditions.get("Ready") == "True",
        allocatable=dict(n.status.allocatable or {}),
        address=next((a.address for a in (n.status.addresses or []) if a.type == "InternalIP"), ""),
    )
