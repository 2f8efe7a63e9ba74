"""Stage 2 against the sandbox: gang launch into the reservation, join EKS, label by topology."""

import json

import pytest

from tasks.errors import StageFailed
from tasks.planning.iam import actions
from tasks.stages import launch as launch_stage
from tasks.stages import reserve as reserve_stage
from tasks.stages import teardown
from tasks.stages.clock import Clock
from tests.sandbox.stages.conftest import tagged

FAST = Clock(sleep=lambda s: None)
POLL = Clock()  # real sleeps while nodes boot and join


@pytest.fixture
def fleet_env(sandbox_stack, aws_env):
    sandbox_stack.require("kube")
    return aws_env


@pytest.fixture
def cluster_and_kube(fleet_env, adapters, bp):
    return adapters.cluster, adapters.kube_nodes


def _fast_join(bp):
    return bp.model_copy(update={"aws": bp.aws.model_copy(update={
        "eks": bp.aws.eks.model_copy(update={"join_timeout_s": 12})})})


def _release(adapters, bp):
    teardown.release(teardown.inventory(adapters.capacity, adapters.instances, bp.name, None),
                     adapters.capacity, adapters.instances, POLL)


def test_four_nodes_launch_into_the_reservation_join_and_prefill_sits_on_the_closest_pair(
        fleet_env, adapters, bp, new_run, cluster_and_kube):
    cluster, kube = cluster_and_kube
    run = new_run(bp)
    reserved = reserve_stage.reserve(bp, run.identity, adapters.capacity, run.record, FAST)
    try:
        fleet = launch_stage.launch(bp, run.identity, reserved, adapters.capacity, adapters.instances,
                                    cluster, kube, run.record, POLL)
        (call,) = fleet_env.admin.requests(action="RunInstances")
        assert call["params"]["MinCount"] == call["params"]["MaxCount"] == 4
        nics = call["launch_template_data"]["NetworkInterfaces"]
        assert [n["InterfaceType"] for n in nics].count("efa-only") == 16
        assert sum(1 for n in nics if n["InterfaceType"] == "interface") == 1
        assert len(fleet.nodes) == 4 and {n.role for n in fleet.nodes} == {"prefill", "decode"}
        prefill = [n for n in fleet.nodes if n.role == "prefill"]
        assert len(prefill) == 2 and fleet.shared_layer == 3
        assert prefill[0].network_nodes[-1] == prefill[1].network_nodes[-1]  # same bottom network node
        labelled = {n.name: n.labels for n in kube.nodes()}
        for n in fleet.nodes:
            labels = labelled[n.node_name]
            assert labels["pdlift.io/role"] == n.role
            assert labels["topology.k8s.aws/network-node-layer-3"] == n.network_nodes[2]
        for i in adapters.instances.describe(ids=[n.instance_id for n in fleet.nodes]):
            assert i.reservation_id == reserved.reservation_id and i.efa_interfaces == 16
        assert {e.kind for e in run.ledger.entries} >= {"launch-template", "instance"}
        made = {f"{r['service']}:{r['action']}".replace("service-quotas:", "servicequotas:")
                for r in fleet_env.admin.requests()}
        assert made <= set(actions()), f"not in `pdlift iam-policy`: {made - set(actions())}"
    finally:
        _release(adapters, bp)
    assert tagged(fleet_env, bp.name) == {}


def test_a_partial_launch_failure_leaves_no_instance_running(fleet_env, adapters, bp, new_run, cluster_and_kube):
    cluster, kube = cluster_and_kube
    run = new_run(bp)
    reserved = reserve_stage.reserve(bp, run.identity, adapters.capacity, run.record, FAST)
    fleet_env.admin.inject(fault="never-boot", times=1)
    quick = _fast_join(bp)
    with pytest.raises(StageFailed, match="not running"):
        launch_stage.launch(quick, run.identity, reserved, adapters.capacity, adapters.instances,
                            cluster, kube, run.record, POLL)
    assert "instances" not in tagged(fleet_env, bp.name)
    _release(adapters, bp)
    assert tagged(fleet_env, bp.name) == {}


def test_a_node_that_never_joins_is_replaced_once_then_the_stage_fails_naming_it(
        fleet_env, adapters, bp, new_run, cluster_and_kube, sandbox_state_dir):
    cluster, kube = cluster_and_kube
    faults = sandbox_state_dir / "sandbox" / "node-faults.json"
    base = fleet_env.env_vars.get("PDLIFT_SANDBOX_NODE_BASE")
    run = new_run(bp)
    reserved = reserve_stage.reserve(bp, run.identity, adapters.capacity, run.record, FAST)
    faults.parent.mkdir(parents=True, exist_ok=True)
    faults.write_text(json.dumps({"*": {"never_join": True}}))  # every node boots; none joins
    try:
        with pytest.raises(StageFailed, match=r"did not join .* even after one replacement") as info:
            launch_stage.launch(_fast_join(bp), run.identity, reserved, adapters.capacity, adapters.instances,
                                cluster, kube, run.record, POLL)
        launched = [r["instance_ids"] for r in fleet_env.admin.requests(action="RunInstances")]
        assert len(launched) == 2  # the gang, then one replacement attempt
        assert all(i in str(info.value) for i in launched[1])
    finally:
        faults.unlink(missing_ok=True)
        _release(adapters, bp)
    assert tagged(fleet_env, bp.name) == {}
    del base
