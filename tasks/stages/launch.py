"""Stage 2: launch the gang of nodes into the reservation, join them to EKS, label by topology.

Never leaves a partial gang: any failure after RunInstances terminates what launched. An instance
that does not join is replaced once; then the stage fails naming it. Each node goes through the
one lifecycle of ``tasks.stages.nodes`` (the fabric stage's replacements do too).
"""

from __future__ import annotations

from blueprints.schema import Blueprint
from tasks.adapters.ec2_instances import Instance
from tasks.adapters.eks import Cluster
from tasks.planning import ec2_requests, identity, topology
from tasks.planning.identity import RunIdentity
from tasks.planning.ledger import LedgerEntry
from tasks.planning.records import Fleet, Reserved
from tasks.stages.clock import Clock
from tasks.stages.nodes import NodeLifecycle
from tasks.stages.ports import Capacity, Ended, Instances, KubeNodes, Record

LABEL_DEPLOYMENT, LABEL_RUN = "pdlift.io/deployment", "pdlift.io/run"
STAGE = "launch"


def launch(bp: Blueprint, run: RunIdentity, reserved: Reserved, cap: Capacity, inst: Instances,
           cluster: Cluster, kube: KubeNodes, record: Record, clock: Clock = Clock(),
           ended: Ended = lambda instance_id: None) -> Fleet:
    nodes = NodeLifecycle(bp, run, reserved, inst, kube, record, ended, clock)
    template_id = _ensure_template(bp, run, reserved, cap, inst, cluster, record)
    instances = _adopt_or_launch(bp, run, nodes, template_id)
    members, replaced = _join(bp, run, nodes, template_id, instances)
    topo = nodes.topology([i.instance_id for i in members])
    roles = topology.assign_roles(topo, bp.topology.prefill.nodes)
    labelled = nodes.label(members, roles.role_of, topo)
    return Fleet(tuple(sorted(labelled, key=lambda n: (n.role != "prefill", n.instance_id))), template_id,
                 roles.shared_layer, tuple(replaced))


def _ensure_template(bp: Blueprint, run: RunIdentity, reserved: Reserved, cap: Capacity, inst: Instances,
                     cluster: Cluster, record: Record) -> str:
    info = cap.instance_type_info(bp.aws.instance_type)
    subnet_id, _ = cap.subnet(bp.aws.subnets[reserved.zone])
    sg_id, _ = cap.security_group(bp.aws.security_group)
    labels = {LABEL_DEPLOYMENT: run.deployment, LABEL_RUN: run.run_id}
    user_data = ec2_requests.nodeadm_user_data(cluster.name, cluster.endpoint, cluster.ca_data,
                                               cluster.service_cidr or bp.aws.eks.service_cidr, labels, [])
    inputs = ec2_requests.LaunchInputs(cap.ami_from_ssm(bp.aws.eks.ami_ssm_parameter), subnet_id, sg_id,
                                       bp.aws.ssh.key_pair, bp.aws.eks.node_instance_profile, reserved.reservation_id,
                                       reserved.placement_group, reserved.capacity_block, user_data)
    request = ec2_requests.launch_template_request(bp, run, info["NetworkInfo"], inputs)
    template_id = inst.ensure_launch_template(request)
    record(LedgerEntry("launch-template", template_id, STAGE))
    return template_id


def _live(inst: Instances, run: RunIdentity) -> list[Instance]:
    filters = identity.run_filters(run.deployment, run.run_id) + [
        {"Name": "instance-state-name", "Values": ["pending", "running"]}]
    return inst.describe(filters=filters)


def _adopt_or_launch(bp: Blueprint, run: RunIdentity, nodes: NodeLifecycle, template_id: str) -> list[Instance]:
    live = _live(nodes.instances, run)
    if len(live) == bp.node_count:
        for i in live:
            nodes.record_instance(i, STAGE)
        return nodes.wait_running([i.instance_id for i in live])
    if live:  # a partial gang from a crashed run: never keep half a gang
        nodes.terminate([i.instance_id for i in live])
    return nodes.launch(ec2_requests.run_instances_request(run, template_id, bp.node_count, 0), bp.node_count, STAGE)


def _join(bp: Blueprint, run: RunIdentity, nodes: NodeLifecycle, template_id: str,
          instances: list[Instance]) -> tuple[list[Instance], list[str]]:
    members, replaced = list(instances), []
    for attempt in (1, 2):
        missing = nodes.wait_joined([i.instance_id for i in members])
        if not missing:
            return members, replaced
        nodes.terminate(missing)
        if attempt == 2:
            raise nodes.join_failure(missing, ", even after one replacement")
        # The relaunch waits for the freed slots itself (ReservationCapacityExceeded), so a
        # terminate still in progress after the bound is no reason to stop here.
        nodes.wait_gone(missing)
        replaced += missing
        request = ec2_requests.run_instances_request(run, template_id, len(missing), attempt)
        fresh = nodes.launch(request, len(missing), STAGE, wait_for_slot=True)
        members = [i for i in members if i.instance_id not in missing] + fresh
    raise AssertionError("unreachable")
