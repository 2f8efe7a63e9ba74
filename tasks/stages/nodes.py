"""One node lifecycle: launch into the reservation, run, verify, join EKS, topology, labels, host keys,
replacement and termination. The launch stage and the fabric stage's replacements both use it, so
a replacement node is checked exactly as a launched one is.

    launch          RunInstances (idempotent by its ClientToken) into the reservation's zone; each
                    instance is recorded the moment it exists; all or nothing: every instance
                    running and verified, or all of them terminated
    verify          in the run's reservation and placement group, with the blueprint's EFA count
    wait_joined     a Ready EKS node with the blueprint's GPUs and EFA devices allocatable, and the
                    2 MiB hugepages an engine pod requests (a node short of them fails at once,
                    named, with the fix: the kubelet's pool is fixed at boot, waiting cannot help)
    topology        DescribeInstanceTopology's network nodes (they appear a little after boot)
    label           role and topology labels on the EKS node (only what differs is patched)
    host_keys       pinned from the console output; nothing connects before they are known
    replace         terminate, wait until the slot frees, launch one, the checks above, the role
                    of the node it replaces; a half-made replacement is terminated
    terminate       and its ledger entry stops billing

A reservation slot frees some minutes after a terminate, so a launch that EC2 answers with
ReservationCapacityExceeded is retried within ``SLOT_WAIT_S`` (docs/sources.md#slot-frees-late).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from math import ceil

from blueprints.schema import Blueprint
from tasks.adapters.ec2_instances import Instance
from tasks.adapters.kube_nodes import NodeRecord
from tasks.adapters.ssh import SshNode
from tasks.errors import CapacityUnavailable, NotReadyYet, StageFailed
from tasks.parsing.console_output import parse_console_output
from tasks.planning import ec2_requests, identity, quantity, topology
from tasks.planning.identity import RunIdentity
from tasks.planning.ledger import LedgerEntry, now_str
from tasks.planning.manifests.common import HUGEPAGES, HUGEPAGES_SIZE
from tasks.planning.records import Node, Reserved
from tasks.stages.clock import Clock, poll_until
from tasks.stages.ports import Ended, Instances, KubeNodes, Record

GPU, EFA = "nvidia.com/gpu", "vpc.amazonaws.com/efa"
SLOT_WAIT_S = 900.0
GONE_WAIT_S = 600.0
TOPOLOGY_WAIT_S = 300.0
HOST_KEYS_WAIT_S = 600.0
STOPPED = ("shutting-down", "terminated", "stopped")


@dataclass
class NodeLifecycle:
    bp: Blueprint
    run: RunIdentity
    reserved: Reserved
    instances: Instances
    kube: KubeNodes
    record: Record
    ended: Ended = lambda instance_id: None
    clock: Clock = Clock()
    _why: dict[str, str] = field(default_factory=dict, init=False, repr=False)  # instance -> why not joined

    # --- launch and verify -------------------------------------------------------------------

    def launch(self, request: dict, count: int, stage: str, note: str = "billed through the reservation",
               wait_for_slot: bool = False) -> list[Instance]:
        """``count`` instances from ``request``, running and verified, or none (all terminated).

        With ``wait_for_slot``, ReservationCapacityExceeded is retried (same request, same
        token) within ``SLOT_WAIT_S``: after a terminate the reservation needs minutes."""
        if not wait_for_slot:
            return self._launch_once(request, count, stage, note)
        last: list[CapacityUnavailable] = []

        def attempt() -> list[Instance] | None:
            try:
                return self._launch_once(request, count, stage, note)
            except CapacityUnavailable as e:
                if e.code != "ReservationCapacityExceeded":
                    raise
                last[:] = [e]
                return None

        try:
            return poll_until(attempt, bound_s=SLOT_WAIT_S, clock=self.clock, interval_s=5.0, max_interval_s=60.0)
        except NotReadyYet:
            raise last[0] from None

    def _launch_once(self, request: dict, count: int, stage: str, note: str) -> list[Instance]:
        launched = self.instances.run(request, zone=self.reserved.zone)
        for i in launched:
            self.record_instance(i, stage, note)
        ids = [i.instance_id for i in launched]
        try:
            if len(ids) != count:
                raise StageFailed(f"asked for {count} instances, EC2 launched {len(ids)}")
            running = self.wait_running(ids)
            self.verify(running)
            return running
        except Exception:
            self.terminate(ids)  # all or nothing: no partial gang left running, whatever went wrong
            raise

    def record_instance(self, i: Instance, stage: str, note: str = "billed through the reservation") -> None:
        self.record(LedgerEntry("instance", i.instance_id, stage, i.zone, 0.0, 0.0, now_str(self.clock.now()),
                                note=note))

    def wait_running(self, ids: list[str]) -> list[Instance]:
        bound = self.bp.aws.eks.join_timeout_s
        seen: dict[str, Instance] = {}

        def probe() -> list[Instance] | None:
            seen.clear()
            seen.update({i.instance_id: i for i in self.instances.describe(ids=ids)})
            stopped = [i for i in ids if i in seen and seen[i].state in STOPPED]
            if stopped:
                raise StageFailed(f"instances {', '.join(stopped)} stopped before running")
            return [seen[i] for i in ids] if all(i in seen and seen[i].state == "running" for i in ids) else None

        try:
            return poll_until(probe, bound_s=bound, clock=self.clock)
        except NotReadyYet:
            waiting = [i for i in ids if not (i in seen and seen[i].state == "running")]
            raise StageFailed(f"instances {', '.join(waiting)} not running after {bound}s") from None

    def verify(self, running: Iterable[Instance]) -> None:
        """Refuse an instance outside the run's reservation or placement group, or with another NIC layout."""
        expected_efa = self.bp.fabric.efa_devices
        for i in running:
            problems = []
            if self.reserved.reservation_id and i.reservation_id != self.reserved.reservation_id:
                # no reservation at all: EC2 launched it On-Demand, outside the capacity the run holds
                problems.append(f"in reservation {i.reservation_id or '(none: On-Demand)'}, "
                                f"not {self.reserved.reservation_id}")
            if self.reserved.placement_group and i.placement_group != self.reserved.placement_group:
                problems.append(f"in placement group '{i.placement_group}', not {self.reserved.placement_group}")
            if i.efa_interfaces != expected_efa:
                problems.append(f"{i.efa_interfaces} EFA interfaces, expected {expected_efa}")
            if problems:
                raise StageFailed(f"instance {i.instance_id}: " + "; ".join(problems))

    # --- EKS ---------------------------------------------------------------------------------

    def joined(self, node: NodeRecord | None) -> bool:
        return self.not_joined(node) is None

    def not_joined(self, node: NodeRecord | None) -> str | None:
        """Why ``node`` cannot take an engine pod yet, or None when it can."""
        if node is None:
            return "no EKS node registered"
        if not node.ready:
            return f"node {node.name} is not Ready"
        for resource, want in ((GPU, self.bp.fabric.gpus), (EFA, self.bp.fabric.efa_devices)):
            if int(node.allocatable.get(resource, "0")) < want:
                return f"node {node.name} has {node.allocatable.get(resource, '0')} {resource} allocatable, not {want}"
        return self.hugepages_short(node)

    @staticmethod
    def hugepages_short(node: NodeRecord) -> str | None:
        """Every engine pod requests ``HUGEPAGES_SIZE`` of 2 MiB hugepages (libfabric's buffer
        pool); a node whose kubelet reports less can never schedule one, however long we wait."""
        have = node.allocatable.get(HUGEPAGES, "0")
        try:
            if quantity.parse(have) >= quantity.parse(HUGEPAGES_SIZE):
                return None
        except ValueError:
            pass
        pages = ceil(quantity.parse(HUGEPAGES_SIZE) / (2 << 20))
        return (f"node {node.name} ({node.instance_id}) is Ready but has {have} {HUGEPAGES} allocatable, and every "
                f"engine pod requests {HUGEPAGES_SIZE}: preallocate 2 MiB hugepages at boot, at least {pages} "
                "(vm.nr_hugepages in the node's user data before nodeadm starts the kubelet, or an AMI or kubelet "
                "config that reserves them, as the EFA installer does on the EKS accelerated AMI)")

    def wait_joined(self, ids: list[str]) -> list[str]:
        """The instances that are not joined when every one is, or the join timeout passes.

        Fails at once, terminating them, when every instance still missing is Ready and only
        short of hugepages: the kubelet reads the pool when it starts, and a replacement boots
        the same AMI with the same user data."""
        missing: list[str] = list(ids)
        short: dict[str, str] = {}

        def probe() -> bool:
            by_id = {n.instance_id: n for n in self.kube.nodes()}
            why = {i: w for i in ids if (w := self.not_joined(by_id.get(i)))}
            for i in ids:
                self._why.pop(i, None)
            self._why.update(why)
            missing[:] = [i for i in ids if i in why]
            short.clear()
            short.update({i: w for i, w in why.items() if i in by_id and w == self.hugepages_short(by_id[i])})
            return not missing or len(short) == len(missing)

        try:
            poll_until(probe, bound_s=self.bp.aws.eks.join_timeout_s, clock=self.clock)
        except NotReadyYet:
            pass
        if missing and set(short) == set(missing):
            self.terminate(missing)
            raise StageFailed("; ".join(short[i] for i in missing) + f". Instance(s) {', '.join(missing)} are "
                              "terminated: a replacement would boot the same way")
        return missing

    def join_failure(self, ids: list[str], after: str = "") -> StageFailed:
        why = "; ".join(f"{i}: {self._why[i]}" for i in ids if i in self._why)
        return StageFailed(f"instance(s) {', '.join(ids)} did not join EKS cluster {self.bp.aws.eks.cluster} as a "
                           f"Ready node with {self.bp.fabric.gpus} GPUs, {self.bp.fabric.efa_devices} EFA and "
                           f"{HUGEPAGES_SIZE} {HUGEPAGES} within {self.bp.aws.eks.join_timeout_s}s{after}; they are "
                           f"terminated" + (f" ({why})" if why else ""))

    def topology(self, ids: list[str]) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}

        def probe() -> dict[str, list[str]] | None:
            found.clear()
            found.update(self.instances.topology(ids))
            return dict(found) if all(found.get(i) for i in ids) else None

        return poll_until(probe, bound_s=TOPOLOGY_WAIT_S, clock=self.clock, what=lambda: (
            "DescribeInstanceTopology still has no network nodes for " + ", ".join(i for i in ids if not found.get(i))))

    def label(self, instances: list[Instance], role_of: Callable[[str], str],
              topo: dict[str, list[str]]) -> list[Node]:
        """Give each instance's EKS node its role and topology labels; the nodes as the run knows them."""
        by_id = {n.instance_id: n for n in self.kube.nodes()}
        gone = [i.instance_id for i in instances if i.instance_id not in by_id]
        if gone:
            raise StageFailed(f"instance(s) {', '.join(gone)} left EKS cluster {self.bp.aws.eks.cluster} after "
                              "joining it; check the nodes' kubelet and the cluster's node events")
        out = []
        for i in instances:
            node, role = by_id[i.instance_id], role_of(i.instance_id)
            patch = topology.label_patch(node.labels, topo[i.instance_id], role)
            if patch:
                self.kube.patch_labels(node.name, patch)
            out.append(Node(i.instance_id, i.private_ip, role, (), node.name, i.zone, tuple(topo[i.instance_id])))
        return out

    # --- SSH host keys -----------------------------------------------------------------------

    def host_keys(self, instance_id: str, bound_s: float = HOST_KEYS_WAIT_S) -> list[str]:
        return host_keys(self.instances, instance_id, self.clock, bound_s)

    def pin(self, nodes: Iterable[Node], bound_s: float = HOST_KEYS_WAIT_S) -> list[Node]:
        return pin(self.instances, nodes, self.clock, bound_s)

    # --- replace and terminate ---------------------------------------------------------------

    def terminate(self, ids: list[str]) -> None:
        if not ids:
            return
        self.instances.terminate(ids)
        for instance_id in ids:
            self.ended(instance_id)

    def wait_gone(self, ids: list[str], bound_s: float = GONE_WAIT_S) -> bool:
        """True once every instance is terminated (its reservation slot is on its way back)."""
        try:
            return poll_until(lambda: all(i.state == "terminated" for i in self.instances.describe(ids=ids)),
                              bound_s=bound_s, clock=self.clock)
        except NotReadyYet:
            return False

    def replace(self, node: Node, template_id: str, stage: str = "fabric") -> Node:
        """A verified, joined, labelled successor of ``node`` with its host keys pinned.

        A reservation has exactly one slot per node: the old one is terminated first. Idempotent
        per replaced node: the ClientToken comes from the run and the instance being replaced."""
        old = node.instance_id
        self.terminate([old])
        if not self.wait_gone([old]):
            raise StageFailed(f"instance {old} still not terminated after {GONE_WAIT_S:.0f} s; its reservation slot "
                              "is not free, so no replacement can launch")
        request = {**ec2_requests.run_instances_request(self.run, template_id, 1),
                   "ClientToken": identity.client_token(self.run, stage, self.reserved.zone, 1, f"replace-{old}")}
        (new,) = self.launch(request, 1, stage, note=f"replaces {old} (fabric ISOLATE)",
                             wait_for_slot=True)
        try:
            if self.wait_joined([new.instance_id]):
                raise StageFailed(f"replacement {new.instance_id} did not join EKS cluster {self.bp.aws.eks.cluster} "
                                  f"as a Ready node with {self.bp.fabric.gpus} GPUs and {self.bp.fabric.efa_devices} "
                                  f"EFA within {self.bp.aws.eks.join_timeout_s}s; it is terminated")
            topo = self.topology([new.instance_id])
            (fresh,) = self.label([new], lambda _: node.role, topo)
            keys = self.host_keys(new.instance_id)
        except Exception:
            self.terminate([new.instance_id])  # never leave a half-made replacement billing
            raise
        return replace(fresh, host_keys=tuple(keys))


def ssh_target(node: Node, port: int | None = None) -> SshNode:
    """How the SSH adapter reaches ``node``: by its address, named by its instance id, keys pinned."""
    return SshNode(node.instance_id, node.address, node.host_keys, port)


def host_keys(instances: Instances, instance_id: str, clock: Clock = Clock(),
              bound_s: float = HOST_KEYS_WAIT_S) -> list[str]:
    """The instance's SSH host key lines from its console output, waiting (bounded) until
    cloud-init has printed them: nothing connects to a node before its keys are known."""
    return poll_until(lambda: parse_console_output(instances.console_output(instance_id)) or None,
                      bound_s=bound_s, clock=clock, interval_s=5.0,
                      what=f"console output of {instance_id} has no SSH host keys after {bound_s:.0f} s; "
                           "refusing to connect without pinned keys")


def pin(instances: Instances, nodes: Iterable[Node], clock: Clock = Clock(),
        bound_s: float = HOST_KEYS_WAIT_S) -> list[Node]:
    """The nodes with their host keys pinned from each instance's console output."""
    return [replace(n, host_keys=tuple(host_keys(instances, n.instance_id, clock, bound_s))) for n in nodes]
