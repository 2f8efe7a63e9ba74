"""One node lifecycle for launch and fabric replacement, driven by spec'd fakes of EC2 and EKS.

The fakes implement ``tasks.stages.ports.Instances`` and ``KubeNodes`` the way the services
behave where it matters here: RunInstances is idempotent by ClientToken and refuses with
ReservationCapacityExceeded while a terminated node's slot is still held, instances go pending ->
running and shutting-down -> terminated over polls, a node joins EKS once running, and the
console prints host keys. Tests assert on what the lifecycle returns and raises and on what EC2
then says exists, never on the fakes' bookkeeping.
"""

from __future__ import annotations

import datetime as dt
import itertools
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from blueprints.loader import load_blueprint
from tasks.adapters.ec2_instances import Instance
from tasks.adapters.kube_nodes import NodeRecord
from tasks.errors import CapacityUnavailable, StageFailed
from tasks.planning.identity import RunIdentity
from tasks.planning.records import Node, Reserved
from tasks.stages.clock import Clock
from tasks.stages.nodes import EFA, GPU, SLOT_WAIT_S, NodeLifecycle

ROOT = Path(__file__).resolve().parents[2]
BP = load_blueprint(ROOT / "blueprints" / "sandbox-2p2d.yaml")
RUN = RunIdentity(BP.name, "r1", dt.datetime(2026, 11, 29, tzinfo=dt.timezone.utc), 24)
RESERVED = Reserved("cr-run", "us-east-2a", "pg-run", False, (), False)
KEY_BLOCK = "-----BEGIN SSH HOST KEY KEYS-----\nssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHostKeyOf{} host\n" \
            "-----END SSH HOST KEY KEYS-----\n"


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def sleep(self, seconds: float) -> None:
        self.t += seconds

    def clock(self) -> Clock:
        return Clock(now=lambda: dt.datetime(2026, 11, 29, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=self.t),
                     sleep=self.sleep, monotonic=lambda: self.t)


@dataclass
class FakeEc2:
    """EC2 for one reservation of ``slots`` instances."""

    slots: int = 4
    lands_in: dict = field(default_factory=lambda: {"placement_group": "pg-run", "reservation_id": "cr-run",
                                                    "efa_interfaces": 16})
    held_after_terminate: int = 0   # RunInstances refusals while a terminated node's slot frees
    stops_at_boot: bool = False
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1))
    _by_token: dict = field(default_factory=dict)
    _instances: dict = field(default_factory=dict)
    _polls: dict = field(default_factory=dict)

    def run(self, request: dict, zone: str | None = None) -> list[Instance]:
        token = request["ClientToken"]
        if token in self._by_token:  # EC2: the same token returns the first call's instances
            return [self._instances[i] for i in self._by_token[token]]
        if self.held_after_terminate:
            self.held_after_terminate -= 1
            raise CapacityUnavailable("ReservationCapacityExceeded", zone=zone, code="ReservationCapacityExceeded")
        live = [i for i in self._instances.values() if i.state in ("pending", "running")]
        if len(live) + request["MinCount"] > self.slots:
            raise CapacityUnavailable("ReservationCapacityExceeded", zone=zone, code="ReservationCapacityExceeded")
        made = []
        for _ in range(request["MaxCount"]):
            n = next(self._ids)
            made.append(Instance(f"i-{n:04d}", "pending", zone or "", f"10.0.0.{n}", launch_time="", tags={},
                                 **self.lands_in))
        self._instances.update({i.instance_id: i for i in made})
        self._by_token[token] = [i.instance_id for i in made]
        return made

    def describe(self, ids: list[str] | None = None, filters: list[dict] | None = None) -> list[Instance]:
        out = []
        for iid in ids or list(self._instances):
            i = self._instances.get(iid)
            if i is None:
                continue
            self._polls[iid] = self._polls.get(iid, 0) + 1
            if i.state == "pending" and self._polls[iid] >= 2:
                i = self._instances[iid] = replace(i, state="stopped" if self.stops_at_boot else "running")
            elif i.state == "shutting-down" and self._polls[iid] >= 2:
                i = self._instances[iid] = replace(i, state="terminated")
            out.append(i)
        return out

    def terminate(self, ids: list[str]) -> None:
        for iid in ids:
            if iid in self._instances and self._instances[iid].state != "terminated":
                self._instances[iid] = replace(self._instances[iid], state="shutting-down")
                self._polls[iid] = 0

    def topology(self, ids: list[str]) -> dict[str, list[str]]:
        return {i: ["nn-1", "nn-2", "nn-3"] for i in ids if self._instances[i].state == "running"}

    def console_output(self, instance_id: str) -> str:
        return KEY_BLOCK.format(instance_id.replace("-", "")) if self._instances[instance_id].state == "running" else ""

    def ensure_launch_template(self, request: dict) -> str:
        return "lt-1"

    def delete_launch_template(self, template_id: str) -> None:
        pass

    def launch_templates(self, filters: list[dict]) -> list[dict]:
        return []


@dataclass
class FakeKube:
    """EKS: a running instance is a Ready node with the blueprint's GPUs and EFA devices."""

    ec2: FakeEc2
    labels: dict = field(default_factory=dict)
    never_join: bool = False  # from now on, new nodes' kubelets never register (bad user data, no route)
    _joined: set = field(default_factory=set)

    def nodes(self, label_selector: str = "") -> list[NodeRecord]:
        running = [i for i in self.ec2.describe() if i.state == "running"]
        if not self.never_join:
            self._joined |= {i.instance_id for i in running}
        running = [i for i in running if i.instance_id in self._joined]
        return [NodeRecord(f"ip-{i.instance_id}", i.instance_id, dict(self.labels.get(f"ip-{i.instance_id}", {})),
                           True, {GPU: str(BP.fabric.gpus), EFA: str(BP.fabric.efa_devices),
                                  "hugepages-2Mi": "10Gi"}) for i in running]  # the EFA installer's pool

    def patch_labels(self, name: str, labels: dict[str, str]) -> None:
        self.labels.setdefault(name, {}).update(labels)

    def namespaces(self, label_selector: str) -> list[str]:
        return []

    def delete_namespace(self, name: str) -> None:
        pass


def lifecycle(ec2: FakeEc2, clock: FakeClock | None = None,
              kube: FakeKube | None = None) -> tuple[NodeLifecycle, list, list]:
    recorded, ended = [], []
    nodes = NodeLifecycle(BP, RUN, RESERVED, ec2, kube or FakeKube(ec2), recorded.append, ended.append,
                          (clock or FakeClock()).clock())
    return nodes, recorded, ended


def fleet_of(ec2: FakeEc2, nodes: NodeLifecycle, count: int = 4) -> list[Node]:
    launched = nodes.launch({"LaunchTemplate": {}, "MinCount": count, "MaxCount": count, "ClientToken": "gang"},
                            count, "launch")
    roles = {i.instance_id: "prefill" if n < 2 else "decode" for n, i in enumerate(launched)}
    return nodes.label(launched, roles.__getitem__, nodes.topology([i.instance_id for i in launched]))


def states(ec2: FakeEc2, *ids: str) -> list[str]:
    return [i.state for i in ec2.describe(ids=list(ids))]


def test_a_replacement_is_verified_joined_labelled_in_its_predecessors_role_and_pinned():
    ec2 = FakeEc2()
    nodes, recorded, ended = lifecycle(ec2)
    old = fleet_of(ec2, nodes)[0]
    new = nodes.replace(old, "lt-1")
    assert new.instance_id != old.instance_id and new.role == old.role == "prefill"
    assert new.host_keys and new.host_keys[0].startswith("ssh-ed25519 ") and new.node_name
    assert new.network_nodes == ("nn-1", "nn-2", "nn-3")
    assert states(ec2, old.instance_id, new.instance_id) == ["terminated", "running"]
    assert ended == [old.instance_id]
    assert [e.resource_id for e in recorded if e.stage == "fabric"] == [new.instance_id]
    assert nodes.replace(old, "lt-1").instance_id == new.instance_id  # the same token: no second instance


@pytest.mark.parametrize("lands_in, problem", [
    ({"placement_group": "pg-other", "reservation_id": "cr-run", "efa_interfaces": 16},
     "in placement group 'pg-other', not pg-run"),
    ({"placement_group": "pg-run", "reservation_id": "cr-other", "efa_interfaces": 16},
     "in reservation cr-other, not cr-run"),
    ({"placement_group": "pg-run", "reservation_id": "cr-run", "efa_interfaces": 15},
     "15 EFA interfaces, expected 16"),
    ({"placement_group": "pg-run", "reservation_id": "", "efa_interfaces": 16},
     r"in reservation \(none: On-Demand\), not cr-run"),
])
def test_a_replacement_that_lands_outside_the_runs_placement_is_refused_and_terminated(lands_in, problem):
    ec2 = FakeEc2()
    nodes, _, ended = lifecycle(ec2)
    fleet = fleet_of(ec2, nodes)
    old = fleet[1]
    ec2.lands_in = lands_in
    with pytest.raises(StageFailed, match=problem):
        nodes.replace(old, "lt-1")
    (stray,) = [i for i in ec2.describe() if i.instance_id not in {n.instance_id for n in fleet}]
    assert stray.state in ("shutting-down", "terminated")
    assert ended == [old.instance_id, stray.instance_id]  # neither bills in the ledger any more


def test_a_launched_gang_is_verified_the_same_way_and_none_of_it_is_left_running():
    ec2 = FakeEc2(lands_in={"placement_group": "pg-other", "reservation_id": "cr-run", "efa_interfaces": 16})
    nodes, _, ended = lifecycle(ec2)
    with pytest.raises(StageFailed, match="placement group 'pg-other'"):
        fleet_of(ec2, nodes)
    assert {i.state for i in ec2.describe()} == {"shutting-down"} and len(ended) == 4


@pytest.mark.parametrize("refusals, ok", [(18, True), (19, False)])
def test_a_replacement_waits_for_the_freed_slot_within_its_bound_and_no_longer(refusals, ok):
    # Attempts at 0, 5, 15, 35, 75 s, then every 60 s: the 19th (at 915 s) is the first after the
    # 900 s bound has passed, and the last.
    ec2, clock = FakeEc2(), FakeClock()
    nodes, _, _ = lifecycle(ec2, clock)
    old = fleet_of(ec2, nodes)[2]
    started = clock.t
    ec2.held_after_terminate = refusals
    if ok:
        assert nodes.replace(old, "lt-1").role == "decode"
    else:
        with pytest.raises(CapacityUnavailable, match="ReservationCapacityExceeded"):
            nodes.replace(old, "lt-1")
        assert clock.t - started >= SLOT_WAIT_S  # it gave up only once the bound had passed


def test_an_instance_that_stops_while_booting_fails_the_launch_at_once():
    ec2, clock = FakeEc2(stops_at_boot=True), FakeClock()
    nodes, _, _ = lifecycle(ec2, clock)
    with pytest.raises(StageFailed, match="stopped before running"):
        fleet_of(ec2, nodes, 1)
    assert clock.t < BP.aws.eks.join_timeout_s


def test_a_replacement_whose_old_node_never_goes_away_launches_nothing():
    ec2 = FakeEc2()
    nodes, _, _ = lifecycle(ec2)
    old = fleet_of(ec2, nodes)[3]
    ec2.terminate = lambda ids: None  # the terminate is accepted but the node stays up
    with pytest.raises(StageFailed, match="still not terminated after 600 s"):
        nodes.replace(old, "lt-1")
    assert len(ec2.describe()) == 4


def test_a_replacement_that_never_joins_eks_is_terminated_and_the_stage_says_why():
    ec2, clock = FakeEc2(), FakeClock()
    kube = FakeKube(ec2)
    nodes, _, ended = lifecycle(ec2, clock, kube)
    fleet = fleet_of(ec2, nodes)
    kube.never_join = True  # the launched fleet joined; what launches from now on does not
    with pytest.raises(StageFailed, match=r"did not join EKS cluster .* within 60s; it is terminated"):
        nodes.replace(fleet[0], "lt-1")
    (new,) = [i for i in ec2.describe() if i.instance_id not in {n.instance_id for n in fleet}]
    assert new.state in ("shutting-down", "terminated") and ended == [fleet[0].instance_id, new.instance_id]
