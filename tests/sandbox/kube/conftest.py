"""Helpers for the Kubernetes stand-in tests: test-private nodes and small pod manifests."""

from __future__ import annotations

import uuid

import pytest
from kubernetes import client

from tests.fixtures.kube import wait_for

IMAGE = "registry.sandbox.test/tool:1"  # matches the session's allowed-image pattern
GPU_NODE = {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "16"}


class PrivateNodes:
    """Join records owned by one test (removed afterwards), tagged so only its pods land there."""

    def __init__(self, sandbox, core):
        self.sandbox, self.core = sandbox, core
        self.tag = uuid.uuid4().hex[:8]
        self.instance_ids: list[str] = []

    def join(self, suffix: str, labels: dict | None = None, taints: list | None = None,
             allocatable: dict | None = None):
        name = f"node-{self.tag}-{suffix}"
        iid = self.sandbox.join(name, {"pdlift.io/test": self.tag, **(labels or {})}, taints,
                                allocatable if allocatable is not None else GPU_NODE)
        self.instance_ids.append(iid)
        return wait_for(lambda: _read_node(self.core, name), what=f"node {name}")

    @property
    def selector(self) -> dict:
        return {"pdlift.io/test": self.tag}

    def cleanup(self) -> None:
        for iid in self.instance_ids:
            self.sandbox.leave(iid)


def _read_node(core, name):
    try:
        return core.read_node(name)
    except client.ApiException as e:
        if e.status == 404:
            return None
        raise


@pytest.fixture
def core(kube_client):
    return client.CoreV1Api(kube_client)


@pytest.fixture
def test_nodes(kube_sandbox, core):
    nodes = PrivateNodes(kube_sandbox, core)
    yield nodes
    nodes.cleanup()


def pod(name: str, command: list[str], node_selector: dict | None = None, gpus: int = 0,
        image: str = IMAGE, **spec) -> dict:
    container = {"name": "main", "image": image, "command": command}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    container.update(spec.pop("container", {}))
    body = {"metadata": {"name": name, "labels": spec.pop("labels", {"app": name})},
            "spec": {"containers": [container], "terminationGracePeriodSeconds": 1, **spec}}
    if node_selector:
        body["spec"]["nodeSelector"] = node_selector
    return body


def pod_state(core, ns: str, name: str):
    p = core.read_namespaced_pod(name, ns)
    statuses = p.status.container_statuses or []
    return p, (statuses[0] if statuses else None)


def wait_running_ready(core, ns: str, name: str, timeout: float = 20):
    def ready():
        try:
            p = core.read_namespaced_pod(name, ns)
        except client.ApiException as e:
            if e.status == 404:  # its controller has not made it yet
                return None
            raise
        conds = {c.type: c.status for c in p.status.conditions or []}
        return p if p.status.phase == "Running" and conds.get("Ready") == "True" else None
    return wait_for(ready, timeout=timeout, what=f"pod {ns}/{name} Running and Ready")


def events_for(core, ns: str, name: str) -> list:
    return core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
