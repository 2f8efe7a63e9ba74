"""Replace one node the fabric stage isolated, with the launch stage's pieces.

Terminate it first (a reservation has exactly one slot per node), wait until it is gone, launch
one instance from the run's launch template into the same reservation (retrying while EC2 still
answers ReservationCapacityExceeded, within a bound), wait until it runs and joins EKS as a Ready
node with the blueprint's GPUs and EFA devices, give it the role and topology labels of the node
it replaces, and pin its SSH host keys from its console output. Idempotent per replaced node:
the ClientToken is derived from the run and the instance being replaced.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from blueprints.schema import Blueprint
from tasks.adapters.ec2_instances import Ec2Instances, Instance
from tasks.adapters.kube_nodes import KubeNodes
from tasks.adapters.ssh_hostkeys import parse_console_output
from tasks.errors import CapacityUnavailable, NotReadyYet, StageFailed
from tasks.planning import ec2_requests as req
from tasks.planning import identity, topology
from tasks.planning.identity import RunIdentity
from tasks.planning.ledger import LedgerEntry, now_str
from tasks.stages.fabric_layers import FabricNode
from tasks.stages.launch import EFA, GPU
from tasks.stages.reserve import Clock, Record

SLOT_WAIT_S = 900.0  # a reservation slot frees minutes after a terminate (reference §1.6)
GONE_WAIT_S = 600.0
STAGE = "fabric"


@dataclass
class Replacer:
    bp: Blueprint
    run: RunIdentity
    template_id: str
    zone: str
    instances: Ec2Instances
    kube: KubeNodes
    record: Record
    ended: Callable[[str], None] = lambda instance_id: None
    clock: Clock = Clock()

    def __call__(self, node: FabricNode, evidence: str) -> FabricNode:
        self.instances.terminate([node.name])
        self.ended(node.name)
        self._wait_gone(node.name)
        new = self._launch(node.name)
        try:
            running = self._wait_running(new.instance_id)
            name = self._wait_joined(new.instance_id)
            network_nodes = self._topology(new.instance_id)
            current = next((n.labels for n in self.kube.nodes() if n.instance_id == new.instance_id), {})
            patch = topology.label_patch(current, network_nodes, node.role)
            if patch:
                self.kube.patch_labels(name, patch)
            keys = self._host_keys(new.instance_id)
        except Exception:
            self.instances.terminate([new.instance_id])  # never leave a half-made replacement billing
            self.ended(new.instance_id)
            raise
        return FabricNode(new.instance_id, running.private_ip, node.role, tuple(keys), name, running.zone,
                          tuple(network_nodes))

    def _launch(self, old_id: str) -> Instance:
        request = {**req.run_instances_request(self.run, self.template_id, 1),
                   "ClientToken": identity.client_token(self.run, STAGE, self.zone, 1, f"replace-{old_id}")}
        deadline, delay = self.clock.monotonic() + SLOT_WAIT_S, 5.0
        while True:
            try:
                (launched,) = self.instances.run(request, zone=self.zone)
                break
            except CapacityUnavailable as e:
                if e.code != "ReservationCapacityExceeded" or self.clock.monotonic() >= deadline:
                    raise
                self.clock.sleep(delay)  # the terminated node's slot has not freed yet
                delay = min(delay * 2, 60.0)
        self.record(LedgerEntry("instance", launched.instance_id, STAGE, launched.zone, 0.0, 0.0,
                                now_str(self.clock.now()), note=f"replaces {old_id} (fabric ISOLATE)"))
        return launched

    def _poll(self, what: str, bound_s: float, probe):
        deadline = self.clock.monotonic() + bound_s
        while True:
            value = probe()
            if value:
                return value
            if self.clock.monotonic() >= deadline:
                raise NotReadyYet(what)
            self.clock.sleep(2.0)

    def _wait_gone(self, instance_id: str) -> None:
        try:
            self._poll(f"instance {instance_id} still not terminated after {GONE_WAIT_S:.0f} s", GONE_WAIT_S,
                       lambda: all(i.state == "terminated" for i in self.instances.describe(ids=[instance_id])))
        except NotReadyYet as e:
            raise StageFailed(f"{e}; its reservation slot is not free, so no replacement can launch") from e

    def _wait_running(self, instance_id: str) -> Instance:
        def probe():
            found = self.instances.describe(ids=[instance_id])
            if found and found[0].state in ("shutting-down", "terminated", "stopped"):
                raise StageFailed(f"replacement instance {instance_id} stopped before running")
            return found[0] if found and found[0].state == "running" else None

        inst = self._poll(f"replacement {instance_id} not running", self.bp.aws.eks.join_timeout_s, probe)
        if inst.efa_interfaces != self.bp.fabric.efa_devices:
            raise StageFailed(f"replacement {instance_id} has {inst.efa_interfaces} EFA interfaces, "
                              f"expected {self.bp.fabric.efa_devices}")
        return inst

    def _wait_joined(self, instance_id: str) -> str:
        spec = self.bp.fabric

        def probe():
            for n in self.kube.nodes():
                if (n.instance_id == instance_id and n.ready and int(n.allocatable.get(GPU, "0")) >= spec.gpus
                        and int(n.allocatable.get(EFA, "0")) >= spec.efa_devices):
                    return n.name
            return None

        try:
            return self._poll("", self.bp.aws.eks.join_timeout_s, probe)
        except NotReadyYet as e:
            raise StageFailed(f"replacement {instance_id} did not join EKS cluster {self.bp.aws.eks.cluster} as a "
                              f"Ready node with {spec.gpus} GPUs and {spec.efa_devices} EFA within "
                              f"{self.bp.aws.eks.join_timeout_s}s; it is terminated") from e

    def _topology(self, instance_id: str) -> list[str]:
        return self._poll(f"DescribeInstanceTopology lists no network nodes for {instance_id}", 300.0,
                          lambda: self.instances.topology([instance_id]).get(instance_id))

    def _host_keys(self, instance_id: str) -> list[str]:
        # cloud-init prints the host keys a little after boot; never connect before they are known.
        return _keys(self.instances, instance_id, self.clock, 600.0)


def pin_fleet(nodes, instances: Ec2Instances, clock: Clock = Clock(), bound_s: float = 600.0) -> list[FabricNode]:
    """FabricNodes for the launch stage's nodes (NodeInfo or its ledger dict), host keys pinned
    from each instance's console output."""
    out = []
    for n in nodes:
        f = n if isinstance(n, dict) else vars(n)
        keys = _keys(instances, f["instance_id"], clock, bound_s)
        out.append(FabricNode(f["instance_id"], f["address"], f["role"], tuple(keys), f.get("node_name", ""),
                              f.get("zone", ""), tuple(f.get("network_nodes") or ())))
    return out


def _keys(instances: Ec2Instances, instance_id: str, clock: Clock, bound_s: float) -> list[str]:
    deadline = clock.monotonic() + bound_s
    while True:
        keys = parse_console_output(instances.console_output(instance_id))
        if keys:
            return keys
        if clock.monotonic() >= deadline:
            raise NotReadyYet(f"console output of {instance_id} has no SSH host keys after {bound_s:.0f} s; "
                              "refusing to connect without pinned keys")
        clock.sleep(5.0)
