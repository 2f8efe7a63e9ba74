"""Stage 2: launch the gang of nodes into the reservation, join them to EKS, label by topology.

Never leaves a partial gang: any failure after RunInstances terminates what launched. An instance
that does not join is replaced once; then the stage fails naming it.
"""

from __future__ import annotations

from dataclasses import dataclass

from blueprints.schema import Blueprint
from tasks.adapters.ec2_capacity import Ec2Capacity
from tasks.adapters.ec2_instances import Ec2Instances, Instance
from tasks.adapters.eks import Cluster
from tasks.adapters.kube_nodes import KubeNodes, NodeRecord
from tasks.errors import CapacityUnavailable, NotReadyYet, PdliftError, StageFailed
from tasks.planning import ec2_requests as req
from tasks.planning import identity, topology
from tasks.planning.identity import RunIdentity
from tasks.planning.ledger import LedgerEntry, now_str
from tasks.stages.reserve import Clock, Record, Reserved

GPU, EFA = "nvidia.com/gpu", "vpc.amazonaws.com/efa"
LABEL_DEPLOYMENT, LABEL_RUN = "pdlift.io/deployment", "pdlift.io/run"


@dataclass(frozen=True)
class NodeInfo:
    instance_id: str
    node_name: str
    address: str
    zone: str
    role: str
    network_nodes: tuple[str, ...]


@dataclass(frozen=True)
class Fleet:
    nodes: tuple[NodeInfo, ...]
    launch_template_id: str
    shared_layer: int
    replaced: tuple[str, ...]

    def addresses(self, role: str | None = None) -> list[str]:
        return [n.address for n in self.nodes if role is None or n.role == role]


def launch(bp: Blueprint, run: RunIdentity, reserved: Reserved, cap: Ec2Capacity, inst: Ec2Instances,
           cluster: Cluster, kube: KubeNodes, record: Record, clock: Clock = Clock()) -> Fleet:
    template_id = _ensure_template(bp, run, reserved, cap, inst, cluster, record)
    instances = _adopt_or_launch(bp, run, reserved, inst, template_id, record, clock)
    nodes, replaced = _join(bp, run, reserved, inst, kube, template_id, instances, record, clock)
    ids = [i.instance_id for i in nodes]
    topo = _topology(bp, inst, ids, clock)
    roles = topology.assign_roles(topo, bp.topology.prefill.nodes)
    by_id = {n.instance_id: n for n in kube.nodes()}
    infos = []
    for i in nodes:
        node = by_id[i.instance_id]
        role = roles.role_of(i.instance_id)
        patch = topology.label_patch(node.labels, topo[i.instance_id], role)
        if patch:
            kube.patch_labels(node.name, patch)
        infos.append(NodeInfo(i.instance_id, node.name, i.private_ip, i.zone, role, tuple(topo[i.instance_id])))
    return Fleet(tuple(sorted(infos, key=lambda n: (n.role != "prefill", n.instance_id))), template_id,
                 roles.shared_layer, tuple(replaced))


def _ensure_template(bp, run, reserved, cap, inst, cluster, record) -> str:
    info = cap.instance_type_info(bp.aws.instance_type)
    subnet_id, _ = cap.subnet(bp.aws.subnets[reserved.zone])
    sg_id, _ = cap.security_group(bp.aws.security_group)
    labels = {LABEL_DEPLOYMENT: run.deployment, LABEL_RUN: run.run_id}
    user_data = req.nodeadm_user_data(cluster.name, cluster.endpoint, cluster.ca_data,
                                      cluster.service_cidr or bp.aws.eks.service_cidr, labels, [])
    inputs = req.LaunchInputs(cap.ami_from_ssm(bp.aws.eks.ami_ssm_parameter), subnet_id, sg_id, bp.aws.ssh.key_pair,
                              bp.aws.eks.node_instance_profile, reserved.reservation_id, reserved.placement_group,
                              reserved.capacity_block, user_data)
    template_id = inst.ensure_launch_template(req.launch_template_request(bp, run, info["NetworkInfo"], inputs))
    record(LedgerEntry("launch-template", template_id, "launch"))
    return template_id


def _live(inst: Ec2Instances, run: RunIdentity) -> list[Instance]:
    filters = identity.run_filters(run.deployment, run.run_id) + [
        {"Name": "instance-state-name", "Values": ["pending", "running"]}]
    return inst.describe(filters=filters)


def _adopt_or_launch(bp, run, reserved, inst, template_id, record, clock) -> list[Instance]:
    live = _live(inst, run)
    if len(live) == bp.node_count:
        for i in live:
            _record_instance(i, record, clock)
        return _wait_running(bp, inst, [i.instance_id for i in live], clock)
    if live:  # a partial gang from a crashed run: never keep half a gang
        inst.terminate([i.instance_id for i in live])
    return _gang(bp, run, reserved, inst, template_id, bp.node_count, 0, record, clock)


def _gang(bp, run, reserved, inst, template_id, count, attempt, record, clock) -> list[Instance]:
    launched = inst.run(req.run_instances_request(run, template_id, count, attempt), zone=reserved.zone)
    for i in launched:
        _record_instance(i, record, clock)
    ids = [i.instance_id for i in launched]
    try:
        if len(ids) != count:
            raise StageFailed(f"asked for {count} instances, EC2 launched {len(ids)}")
        running = _wait_running(bp, inst, ids, clock)
        _verify(bp, reserved, running)
        return running
    except PdliftError:
        inst.terminate(ids)  # all or nothing: no partial gang left running
        raise


def _record_instance(i: Instance, record: Record, clock: Clock) -> None:
    record(LedgerEntry("instance", i.instance_id, "launch", i.zone, 0.0, 0.0, now_str(clock.now()),
                       note="billed through the reservation"))


def _wait_running(bp, inst, ids, clock) -> list[Instance]:
    deadline = clock.monotonic() + bp.aws.eks.join_timeout_s
    while True:
        found = {i.instance_id: i for i in inst.describe(ids=ids)}
        dead = [i for i in ids if found.get(i) and found[i].state in ("shutting-down", "terminated", "stopped")]
        if dead:
            raise StageFailed(f"instances {', '.join(dead)} stopped before running")
        if all(found.get(i) and found[i].state == "running" for i in ids):
            return [found[i] for i in ids]
        if clock.monotonic() >= deadline:
            waiting = [i for i in ids if not (found.get(i) and found[i].state == "running")]
            raise StageFailed(f"instances {', '.join(waiting)} not running after {bp.aws.eks.join_timeout_s}s")
        clock.sleep(2.0)


def _verify(bp, reserved, running: list[Instance]) -> None:
    expected_efa = bp.fabric.efa_devices
    for i in running:
        problems = []
        if reserved.reservation_id and i.reservation_id and i.reservation_id != reserved.reservation_id:
            problems.append(f"in reservation {i.reservation_id}, not {reserved.reservation_id}")
        if reserved.placement_group and i.placement_group != reserved.placement_group:
            problems.append(f"in placement group '{i.placement_group}', not {reserved.placement_group}")
        if i.efa_interfaces != expected_efa:
            problems.append(f"{i.efa_interfaces} EFA interfaces, expected {expected_efa}")
        if problems:
            raise StageFailed(f"instance {i.instance_id}: " + "; ".join(problems))


def _joined(bp, node: NodeRecord | None) -> bool:
    if node is None or not node.ready:
        return False
    gpus_ok = int(node.allocatable.get(GPU, "0")) >= bp.fabric.gpus
    return gpus_ok and int(node.allocatable.get(EFA, "0")) >= bp.fabric.efa_devices


def _join(bp, run, reserved, inst, kube, template_id, instances, record, clock):
    members, replaced = list(instances), []
    for attempt in (1, 2):
        missing = _wait_join(bp, kube, [i.instance_id for i in members], clock)
        if not missing:
            return members, replaced
        if attempt == 2:
            inst.terminate(missing)
            raise StageFailed(f"instance(s) {', '.join(missing)} did not join EKS cluster {bp.aws.eks.cluster} as a "
                              f"Ready node with {bp.fabric.gpus} GPUs and {bp.fabric.efa_devices} EFA within "
                              f"{bp.aws.eks.join_timeout_s}s, even after one replacement; they are terminated")
        inst.terminate(missing)
        _wait_gone(inst, missing, clock)
        replaced += missing
        fresh = _relaunch(bp, run, reserved, inst, template_id, len(missing), attempt, record, clock)
        members = [i for i in members if i.instance_id not in missing] + fresh
    raise AssertionError("unreachable")


def _relaunch(bp, run, reserved, inst, template_id, count, attempt, record, clock) -> list[Instance]:
    """Launch replacements; a reservation slot frees minutes after a terminate, so wait for it
    (ReservationCapacityExceeded) within a bound (reference §1.6: about 10 minutes)."""
    deadline = clock.monotonic() + 900
    delay = 5.0
    while True:
        try:
            return _gang(bp, run, reserved, inst, template_id, count, attempt, record, clock)
        except CapacityUnavailable as e:
            if e.code != "ReservationCapacityExceeded" or clock.monotonic() >= deadline:
                raise
            clock.sleep(delay)
            delay = min(delay * 2, 60.0)


def _wait_join(bp, kube, ids, clock) -> list[str]:
    deadline = clock.monotonic() + bp.aws.eks.join_timeout_s
    while True:
        by_id = {n.instance_id: n for n in kube.nodes()}
        missing = [i for i in ids if not _joined(bp, by_id.get(i))]
        if not missing or clock.monotonic() >= deadline:
            return missing
        clock.sleep(2.0)


def _wait_gone(inst, ids, clock, bound_s: float = 600.0) -> None:
    """Wait for terminate so the reservation slot frees before relaunching (bounded)."""
    deadline = clock.monotonic() + bound_s
    while clock.monotonic() < deadline:
        if all(i.state == "terminated" for i in inst.describe(ids=ids)):
            return
        clock.sleep(2.0)


def _topology(bp, inst, ids, clock) -> dict[str, list[str]]:
    deadline = clock.monotonic() + 300
    while True:
        topo = inst.topology(ids)
        if all(topo.get(i) for i in ids):
            return topo
        if clock.monotonic() >= deadline:
            raise NotReadyYet(f"DescribeInstanceTopology still has no network nodes for "
                              f"{', '.join(i for i in ids if not topo.get(i))}")
        clock.sleep(2.0)
