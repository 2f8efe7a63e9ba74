"""Nodes come from join records; the scheduler places pods by selectors, affinity, taints, GPUs."""

from __future__ import annotations

from tests.fixtures.kube import wait_for
from tests.sandbox.kube.conftest import events_for, pod

SLEEP = ["sleep", "60"]


def _node_of(core, ns, name):
    return core.read_namespaced_pod(name, ns).spec.node_name


def _unschedulable_message(core, ns, name):
    conds = core.read_namespaced_pod(name, ns).status.conditions or []
    c = next((c for c in conds if c.type == "PodScheduled"), None)
    return c.message if c is not None and c.status == "False" else None


def test_a_join_record_becomes_a_ready_node_with_its_labels_taints_and_allocatable(
        kube_sandbox, core, test_nodes):
    node = test_nodes.join("a", labels={"topology.k8s.aws/network-node-layer-1": "nn-111",
                                        "pdlift.io/role": "prefill"},
                           taints=[{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}])
    assert node.metadata.labels["topology.k8s.aws/network-node-layer-1"] == "nn-111"
    assert node.metadata.labels["pdlift.io/role"] == "prefill"
    assert [(t.key, t.value, t.effect) for t in node.spec.taints] == [("nvidia.com/gpu", "true", "NoSchedule")]
    assert node.status.allocatable["nvidia.com/gpu"] == "8"
    assert node.status.allocatable["vpc.amazonaws.com/efa"] == "16"
    assert {c.type: c.status for c in node.status.conditions}["Ready"] == "True"
    assert node.spec.provider_id.endswith(test_nodes.instance_ids[0])
    kube_sandbox.leave(test_nodes.instance_ids[0])
    wait_for(lambda: node.metadata.name not in {n.metadata.name for n in core.list_node().items},
             timeout=10, what="the node to leave")


def test_a_node_configured_for_another_cluster_never_appears(kube_sandbox, core, test_nodes):
    stray = kube_sandbox.join(f"stray-{test_nodes.tag}", cluster="someone-elses-cluster")
    try:
        test_nodes.join("control")  # written after the stray one, so read in the same poll or later
        assert f"stray-{test_nodes.tag}" not in {n.metadata.name for n in core.list_node().items}
    finally:
        kube_sandbox.leave(stray)


def test_pods_go_where_their_node_selector_points(core, test_nodes, kube_namespace):
    test_nodes.join("prefill", labels={"pdlift.io/role": "prefill"})
    decode = test_nodes.join("decode", labels={"pdlift.io/role": "decode"})
    core.create_namespaced_pod(kube_namespace, pod("d", SLEEP, {**test_nodes.selector,
                                                                 "pdlift.io/role": "decode"}))
    assert wait_for(lambda: _node_of(core, kube_namespace, "d")) == decode.metadata.name


def test_required_anti_affinity_spreads_pods_and_leaves_the_extra_one_pending(
        core, test_nodes, kube_namespace):
    test_nodes.join("x")
    test_nodes.join("y")
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
        "labelSelector": {"matchLabels": {"app": "spread"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    for name in ("s1", "s2", "s3"):
        core.create_namespaced_pod(kube_namespace, pod(name, SLEEP, test_nodes.selector,
                                                       labels={"app": "spread"}, affinity=anti))
    placed = {wait_for(lambda n=n: _node_of(core, kube_namespace, n)) for n in ("s1", "s2")}
    assert len(placed) == 2
    message = wait_for(lambda: _unschedulable_message(core, kube_namespace, "s3"))
    assert "didn't match pod anti-affinity rules" in message


def test_gpu_requests_are_counted_against_allocatable(core, test_nodes, kube_namespace):
    node = test_nodes.join("gpu")
    core.create_namespaced_pod(kube_namespace, pod("first", SLEEP, test_nodes.selector, gpus=8))
    assert wait_for(lambda: _node_of(core, kube_namespace, "first")) == node.metadata.name
    core.create_namespaced_pod(kube_namespace, pod("second", SLEEP, test_nodes.selector, gpus=1))
    message = wait_for(lambda: _unschedulable_message(core, kube_namespace, "second"))
    assert "Insufficient nvidia.com/gpu" in message
    assert core.read_namespaced_pod("second", kube_namespace).status.phase == "Pending"


def test_a_pod_needing_more_gpus_than_any_node_has_stays_pending_with_an_event(
        core, test_nodes, kube_namespace):
    test_nodes.join("small")
    core.create_namespaced_pod(kube_namespace, pod("huge", SLEEP, gpus=16))
    wait_for(lambda: _unschedulable_message(core, kube_namespace, "huge"))
    event = wait_for(lambda: [e for e in events_for(core, kube_namespace, "huge")
                              if e.reason == "FailedScheduling"])[0]
    assert event.type == "Warning" and "Insufficient nvidia.com/gpu" in event.message
    assert event.message.startswith("0/")
    assert core.read_namespaced_pod("huge", kube_namespace).spec.node_name is None


def test_taints_keep_pods_off_unless_tolerated(core, test_nodes, kube_namespace):
    test_nodes.join("tainted", taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
    core.create_namespaced_pod(kube_namespace, pod("plain", SLEEP, test_nodes.selector))
    message = wait_for(lambda: _unschedulable_message(core, kube_namespace, "plain"))
    assert "untolerated taint {dedicated: gpu}" in message
    core.create_namespaced_pod(kube_namespace, pod("tolerant", SLEEP, test_nodes.selector, tolerations=[
        {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]))
    assert wait_for(lambda: _node_of(core, kube_namespace, "tolerant"))


def test_required_node_affinity_with_set_operators(core, test_nodes, kube_namespace):
    test_nodes.join("l1", labels={"topology.k8s.aws/network-node-layer-3": "nn-a"})
    want = test_nodes.join("l2", labels={"topology.k8s.aws/network-node-layer-3": "nn-b"})
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "topology.k8s.aws/network-node-layer-3", "operator": "NotIn",
                               "values": ["nn-a"]},
                              {"key": "pdlift.io/test", "operator": "In",
                               "values": [test_nodes.tag]}]}]}}}
    core.create_namespaced_pod(kube_namespace, pod("aff", SLEEP, affinity=affinity))
    assert wait_for(lambda: _node_of(core, kube_namespace, "aff")) == want.metadata.name


def test_pods_on_a_node_whose_record_is_removed_are_deleted(kube_sandbox, core, test_nodes,
                                                            kube_namespace):
    test_nodes.join("gone")
    core.create_namespaced_pod(kube_namespace, pod("orphan", SLEEP, test_nodes.selector))
    wait_for(lambda: _node_of(core, kube_namespace, "orphan"))
    kube_sandbox.leave(test_nodes.instance_ids[0])
    wait_for(lambda: "orphan" not in {p.metadata.name for p in
                                      core.list_namespaced_pod(kube_namespace).items},
             timeout=10, what="the pod of a vanished node to be deleted")


def test_two_pods_listening_on_one_port_never_share_a_node(core, test_nodes, kube_namespace):
    # Pods listen on their node's address here, so a container port is a host port.
    first = test_nodes.join("port-a", allocatable={}).metadata.name
    listening = {"ports": [{"name": "http", "containerPort": 18080}]}
    for name in ("one", "two"):
        core.create_namespaced_pod(kube_namespace, pod(name, ["sleep", "60"], test_nodes.selector,
                                                       container=listening))
    placed = wait_for(lambda: core.read_namespaced_pod("one", kube_namespace).spec.node_name)
    assert placed == first
    two = wait_for(lambda: next((c for c in core.read_namespaced_pod("two", kube_namespace).status.conditions or []
                                 if c.type == "PodScheduled" and c.status == "False"), None))
    assert "didn't have free ports for the requested pod ports" in two.message
    second = test_nodes.join("port-b", allocatable={}).metadata.name
    assert wait_for(lambda: core.read_namespaced_pod("two", kube_namespace).spec.node_name) == second
