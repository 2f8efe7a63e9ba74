"""Stage 2: launch the gang of nodes into the reservation, join them to EKS, label by topology.

Never leaves a partial gang: any failure after RunInstances terminates what launched. An instance
that does not join is replaced once; then the stage fails naming it. Each node goes through the
one lifecycle of ``tasks.stages.nodes`` (the fabric stage's replacements do too).

A gang launched again after its predecessor's instances were terminated (the half gang a crash
left, a gang a failed attempt terminated) gets a new token generation, recorded before the send:
EC2 refuses a token whose instances are terminated (IdempotentInstanceTerminated). A Capacity
Block refuses launches until its StartDate (InvalidCapacityReservationState.PendingActivation):
the launch waits for a start that is at most ``START_RACE_S`` away (the pipeline waited for the
rest without a worker), and refuses one that is further.

Progress (``on_progress``): the gang's instances running, and joined to the cluster, as the
lifecycle's own polls of EC2 and EKS see them (``_Seen*`` note their answers: no extra call).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from blueprints.schema import Blueprint
from tasks.adapters.ec2_instances import Instance
from tasks.adapters.eks import Cluster
from tasks.adapters.kube_nodes import NodeRecord
from tasks.errors import CapacityUnavailable, NotReadyYet, RequestRejected, StageFailed
from tasks.planning import ec2_requests, identity, topology
from tasks.planning.aws_errors import NOT_STARTED, TOKEN_SPENT
from tasks.planning.identity import Generation, RunIdentity
from tasks.planning.ledger import LedgerEntry, generation_entry, parse_time
from tasks.planning.progress import Count, gang_counts
from tasks.planning.manifests.common import DEPLOYMENT_LABEL as LABEL_DEPLOYMENT, RUN_LABEL as LABEL_RUN
from tasks.planning.records import Fleet, Reserved
from tasks.stages.clock import Clock, poll_until
from tasks.stages.nodes import NodeLifecycle
from tasks.stages.ports import Capacity, Ended, Instances, KubeNodes, Record

STAGE = "launch"
SCOPE = "launch"  # the token generation of this run's RunInstances requests
# How far ahead a Capacity Block's start may be for the launch to wait for it here (a resumed
# run arrives at the start, give or take clocks and EC2's eventual consistency); pdlift's choice.
START_RACE_S = 600.0

OnProgress = Callable[[list[Count], bool], None]  # (instances running, joined; final)


@dataclass
class _Tokens:
    """The run's current RunInstances token generation; the next one is recorded before use."""

    generation: Generation
    record: Record
    clock: Clock

    def next(self, why: str) -> None:
        self.generation = self.generation.next(self.clock.now())
        self.record(generation_entry(SCOPE, self.generation, STAGE, why))


@dataclass
class _Gang:
    """The gang's progress from what EC2 and EKS answered the lifecycle's own polls (``_Seen*``)."""

    size: int
    on_progress: OnProgress
    is_joined: Callable[[NodeRecord], bool] = lambda node: False
    states: dict[str, str] = field(default_factory=dict)  # instance -> EC2 state, as last described
    joined: set[str] = field(default_factory=set)
    _sent: list[Count] | None = field(default=None, init=False, repr=False)

    def report(self, final: bool = False) -> None:
        counts = gang_counts(self.size, self.states, self.joined)
        if final or counts != self._sent:
            self._sent = counts
            self.on_progress(counts, final)


class _SeenInstances:
    """The Instances port as is, noting each instance's state in every DescribeInstances answer
    (and the ones it terminates: they stop counting before EC2 has described them again)."""

    def __init__(self, inner: Instances, gang: _Gang):
        self._inner, self._gang = inner, gang

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    def describe(self, ids: list[str] | None = None, filters: list[dict] | None = None) -> list[Instance]:
        found = self._inner.describe(ids=ids, filters=filters)
        self._gang.states.update({i.instance_id: i.state for i in found})
        self._gang.report()
        return found

    def terminate(self, ids: list[str]) -> None:
        self._inner.terminate(ids)
        self._gang.states.update(dict.fromkeys(ids, "shutting-down"))
        self._gang.report()


class _SeenNodes:
    """The KubeNodes port as is, noting which instances every full listing shows joined."""

    def __init__(self, inner: KubeNodes, gang: _Gang):
        self._inner, self._gang = inner, gang

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    def nodes(self, label_selector: str = "") -> list[NodeRecord]:
        found = self._inner.nodes(label_selector)
        if not label_selector:  # the whole cluster: who is missing is known too
            self._gang.joined = {n.instance_id for n in found if self._gang.is_joined(n)}
            self._gang.report()
        return found


def launch(bp: Blueprint, run: RunIdentity, reserved: Reserved, cap: Capacity, inst: Instances,
           cluster: Cluster, kube: KubeNodes, record: Record, clock: Clock = Clock(),
           ended: Ended = lambda instance_id: None, generations: Mapping[str, Generation] | None = None,
           on_progress: OnProgress | None = None) -> Fleet:
    """``generations``: the token generations the ledger recorded (``ledger.generations``).
    ``on_progress(counts, final)``: instances running and joined of the gang, when they change."""
    _refuse_a_distant_start(reserved, clock)
    gang = _Gang(bp.node_count, on_progress or (lambda counts, final: None))
    nodes = NodeLifecycle(bp, run, reserved, _SeenInstances(inst, gang), _SeenNodes(kube, gang), record, ended, clock)
    gang.is_joined = nodes.joined
    gang.report()
    tokens = _Tokens((generations or {}).get(SCOPE, Generation()), record, clock)
    template_id = _ensure_template(bp, run, reserved, cap, inst, cluster, record)
    instances = _adopt_or_launch(bp, run, nodes, template_id, tokens)
    members, replaced = _join(bp, run, nodes, template_id, instances, tokens)
    topo = nodes.topology([i.instance_id for i in members])
    roles = topology.assign_roles(topo, bp.topology.prefill.nodes)
    labelled = nodes.label(members, roles.role_of, topo)
    gang.report(final=True)
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


def _refuse_a_distant_start(reserved: Reserved, clock: Clock) -> None:
    if not (reserved.capacity_block and reserved.starts_at):
        return
    ahead = (parse_time(reserved.starts_at) - clock.now()).total_seconds()
    if ahead > START_RACE_S:
        raise StageFailed(f"Capacity Block {reserved.reservation_id} begins at {reserved.starts_at}, in "
                          f"{ahead / 3600:.1f} h: EC2 refuses launches into it before then. Launch after its start "
                          "(the migrate flow waits for it by itself, without holding a worker)")


def _adopt_or_launch(bp: Blueprint, run: RunIdentity, nodes: NodeLifecycle, template_id: str,
                     tokens: _Tokens) -> list[Instance]:
    live = _live(nodes.instances, run)
    if len(live) == bp.node_count:
        for i in live:
            nodes.record_instance(i, STAGE)
        return nodes.wait_running([i.instance_id for i in live])
    if live:  # a partial gang from a crashed run: never keep half a gang
        nodes.terminate([i.instance_id for i in live])
        # That gang's token is spent on terminated instances: a new generation, and the slots
        # the terminated half held free only after EC2's clean-up (docs/sources.md#slot-frees-late).
        tokens.next(f"partial gang {', '.join(i.instance_id for i in live)} terminated: launch the gang again")
    return _launch(nodes, tokens, lambda g: ec2_requests.run_instances_request(
        run, template_id, bp.node_count, 0, g), bp.node_count, wait_for_slot=bool(live))


def _launch(nodes: NodeLifecycle, tokens: _Tokens, request_for: Callable[[int], dict], count: int,
            wait_for_slot: bool = False) -> list[Instance]:
    """``nodes.launch`` of ``request_for(generation)``; a token whose instances are terminated
    begins the next generation (once), and a Capacity Block that has not begun yet is waited for
    within ``START_RACE_S``."""

    def once() -> list[Instance]:
        try:
            return nodes.launch(request_for(tokens.generation.number), count, STAGE, wait_for_slot=wait_for_slot)
        except RequestRejected as e:
            if e.code not in TOKEN_SPENT:
                raise
            tokens.next("the instances this token launched are terminated (IdempotentInstanceTerminated)")
            return nodes.launch(request_for(tokens.generation.number), count, STAGE, wait_for_slot=wait_for_slot)

    early: list[CapacityUnavailable] = []

    def attempt() -> list[Instance] | None:
        try:
            return once()
        except CapacityUnavailable as e:
            if e.code not in NOT_STARTED:
                raise
            early[:] = [e]  # raced the block's start: wait, then the same request again
            return None

    try:
        return poll_until(attempt, bound_s=START_RACE_S, clock=nodes.clock, interval_s=5.0, max_interval_s=30.0)
    except NotReadyYet:
        raise StageFailed(f"the Capacity Block {nodes.reserved.reservation_id} was still not active "
                          f"{START_RACE_S:.0f} s after the first launch: {early[0]}") from early[0]


def _join(bp: Blueprint, run: RunIdentity, nodes: NodeLifecycle, template_id: str,
          instances: list[Instance], tokens: _Tokens) -> tuple[list[Instance], list[str]]:
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
        fresh = _launch(nodes, tokens, lambda g, n=len(missing), a=attempt: ec2_requests.run_instances_request(
            run, template_id, n, a, g), len(missing), wait_for_slot=True)
        members = [i for i in members if i.instance_id not in missing] + fresh
    raise AssertionError("unreachable")
