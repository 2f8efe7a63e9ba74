"""Nodes report allocatable hugepages-2Mi only as their kernel preallocated them, as a kubelet does;
the join check reads that through the adapter and refuses a node short of what an engine pod requests."""

from __future__ import annotations

from sandbox.nodes.records import join_record
from sandbox.nodes.userdata import NodeJoin
from tasks.adapters.kube_nodes import KubeNodes
from tasks.planning.manifests.common import HUGEPAGES, HUGEPAGES_SIZE
from tests.fixtures.kube import wait_for
from tests.sandbox.kube.conftest import pod
from tests.unit.test_node_lifecycle import FakeEc2, lifecycle

SLEEP = ["sleep", "60"]


def _allocatable(faults: dict) -> dict:
    """What a sandbox node's join record advertises (sandbox/nodes), with these node faults."""
    return join_record(instance_id="i-0hp", address="127.0.0.99", hostname="ip-hp", instance_type="p5en.48xlarge",
                       region="us-east-2", network_nodes=[], join=NodeJoin(cluster="c"), faults=faults,
                       zone=None)["allocatable"]


def test_a_node_without_preallocated_hugepages_reports_none_and_never_counts_as_joined(
        kube_client, core, test_nodes, kube_namespace):
    pooled = test_nodes.join("pooled", allocatable=_allocatable({}))
    bare = test_nodes.join("bare", allocatable=_allocatable({"hugepages_2mi": "0"}))
    assert pooled.status.allocatable[HUGEPAGES] == "10Gi" and bare.status.allocatable[HUGEPAGES] == "0"
    plain = test_nodes.join("plain", allocatable={"nvidia.com/gpu": "8"})  # a record that says nothing of them
    assert plain.status.allocatable[HUGEPAGES] == "0"

    seen = {n.name: n for n in KubeNodes(kube_client).nodes(label_selector=f"pdlift.io/test={test_nodes.tag}")}
    nodes, _, _ = lifecycle(FakeEc2())
    assert nodes.joined(seen[pooled.metadata.name])
    why = nodes.not_joined(seen[bare.metadata.name])
    assert f"{bare.metadata.name} (" in why and "has 0 hugepages-2Mi allocatable" in why and "preallocate" in why

    engine_like = pod("engine", SLEEP, {"kubernetes.io/hostname": bare.metadata.name},
                      container={"resources": {"requests": {HUGEPAGES: HUGEPAGES_SIZE, "memory": "1Gi"},
                                               "limits": {HUGEPAGES: HUGEPAGES_SIZE, "memory": "1Gi"}}})
    core.create_namespaced_pod(kube_namespace, engine_like)
    conds = lambda: next((c.message for c in core.read_namespaced_pod("engine", kube_namespace).status.conditions or []
                          if c.type == "PodScheduled" and c.status == "False"), None)
    assert "Insufficient hugepages-2Mi" in wait_for(conds, what="the engine-like pod to be unschedulable")
