"""The launch stage's progress follows what EC2 and EKS answered the node lifecycle's own polls:
instances count as running once DescribeInstances says so and stop counting once they are
terminated, they count as joined once a full listing of the cluster shows them able to take a
pod; and a launch whose progress reports fail still launches the gang. Driven by the spec'd EC2
and EKS fakes of ``test_node_lifecycle``; what is asserted is the counts reported and the fleet."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from tasks.adapters.eks import Cluster
from tasks.planning.progress import Count
from tasks.progress import StageProgress
from tasks.stages import launch as stage
from tasks.stages.nodes import EFA
from tests.unit.test_node_lifecycle import BP, RESERVED, RUN, FakeClock, FakeEc2, FakeKube, lifecycle

GANG = {"LaunchTemplate": {}, "MinCount": 4, "MaxCount": 4, "ClientToken": "gang"}


def _gang(is_joined=lambda node: node.ready) -> tuple[stage._Gang, list[tuple[int, int, bool]]]:
    seen: list[tuple[int, int, bool]] = []  # (running, joined, final) as reported

    def on_progress(counts: list[Count], final: bool) -> None:
        running, joined = counts
        seen.append((running.done, joined.done, final))

    return stage._Gang(4, on_progress, is_joined), seen


def test_instances_count_as_running_when_ec2_describes_them_running_and_stop_counting_when_terminated():
    ec2 = FakeEc2()
    gang, seen = _gang()
    inst = stage._SeenInstances(ec2, gang)
    ids = [i.instance_id for i in inst.run(GANG)]  # not a describe: EC2 has said nothing of their state yet
    assert seen == []
    inst.describe(ids=ids)  # pending at the first poll
    inst.describe(ids=ids)  # running at the second
    inst.describe(ids=ids)  # the same answer: no report
    assert seen == [(0, 0, False), (4, 0, False)]
    inst.terminate(ids[:1])  # stops counting at once, before EC2 describes it again
    assert seen[-1] == (3, 0, False)
    inst.describe(ids=ids)
    inst.describe(ids=ids)
    assert [i.state for i in ec2.describe(ids=ids[:1])] == ["terminated"] and seen[-1] == (3, 0, False)
    assert len(seen) == 3


def test_instances_count_as_joined_from_the_clusters_full_listing_only_while_ec2_has_them_running():
    ec2 = FakeEc2()
    kube = FakeKube(ec2)
    nodes, _, _ = lifecycle(ec2, kube=kube)
    gang, seen = _gang(nodes.joined)
    inst, listed = stage._SeenInstances(ec2, gang), stage._SeenNodes(kube, gang)
    ids = [i.instance_id for i in inst.run(GANG)]
    ec2.describe(ids=ids)  # EC2 moves them to running; the gang has not been told
    listed.nodes("pdlift.io/role=prefill")  # a filtered listing says nothing of who is missing
    assert seen == []
    listed.nodes()
    assert seen == [(0, 0, False)]  # joined, but not yet described running: neither counts
    inst.describe(ids=ids)
    assert seen[-1] == (4, 4, False)
    inst.terminate(ids[3:])
    assert seen[-1] == (3, 3, False)


def test_a_node_registered_but_unable_to_take_a_pod_is_not_joined():
    ec2 = FakeEc2()
    kube = FakeKube(ec2)
    nodes, _, _ = lifecycle(ec2, kube=kube)
    gang, seen = _gang(nodes.joined)
    inst, listed = stage._SeenInstances(ec2, gang), stage._SeenNodes(kube, gang)
    ids = [i.instance_id for i in inst.run(GANG)]
    inst.describe(ids=ids)
    inst.describe(ids=ids)
    short = {r.instance_id for r in kube.nodes()[:1]}
    real_nodes = kube.nodes

    def one_short_of_efa(label_selector=""):  # the device plugin has not advertised its EFA devices
        return [replace(r, allocatable={**r.allocatable, EFA: "0"}) if r.instance_id in short else r
                for r in real_nodes(label_selector)]

    kube.nodes = one_short_of_efa
    listed.nodes()
    assert seen[-1] == (4, 3, False)


class _Capacity:
    """What the launch template needs of EC2 capacity (the p5en layout: 16 EFA cards)."""

    def instance_type_info(self, instance_type):
        return {"NetworkInfo": {"NetworkCards": [{"NetworkCardIndex": i} for i in range(16)],
                                "EfaInfo": {"MaximumEfaInterfaces": 16}}}

    def subnet(self, ref):
        return "subnet-1", "us-east-2a"

    def security_group(self, ref):
        return "sg-1", False

    def ami_from_ssm(self, parameter):
        return "ami-1"


CLUSTER = Cluster("pdlift", "https://127.0.0.1:6443", "", "10.100.0.0/16")


def _launch(on_progress):
    ec2, clock = FakeEc2(), FakeClock()
    return ec2, stage.launch(BP, RUN, RESERVED, _Capacity(), ec2, CLUSTER, FakeKube(ec2), lambda entry: None,
                             clock.clock(), on_progress=on_progress)


def test_a_launch_reports_its_gang_from_nothing_to_every_instance_running_and_joined():
    reports: list[tuple[list[Count], bool]] = []
    _, fleet = _launch(lambda counts, final: reports.append((counts, final)))
    assert len(fleet.nodes) == 4
    assert reports[0] == ([Count("running", 0, 4), Count("joined", 0, 4)], False)
    assert reports[-1] == ([Count("running", 4, 4), Count("joined", 4, 4)], True)
    totals = [sum(c.done for c in counts) for counts, _ in reports]
    assert totals == sorted(totals)  # never goes back
    assert len(reports) == len({tuple(c) for c, _ in reports}) + 1  # each change once, then the final


@pytest.mark.parametrize("failing", [("update",), ("create", "update")])
def test_a_launch_whose_progress_artifacts_time_out_still_launches_the_gang_and_terminates_nothing(
        failing, monkeypatch, caplog):
    # One timeout of the Prefect API inside the lifecycle's wait for the gang to run: before reports
    # were guarded, it failed the launch, and the launch's clean-up terminated the whole gang.
    import httpx

    calls: list[str] = []

    def api(name):
        def call(*args, **kwargs):
            calls.append(name)
            if name in failing:
                raise httpx.ReadTimeout("timed out")
            return f"artifact-{len(calls)}"
        return call

    monkeypatch.setattr("tasks.progress.create_progress_artifact", api("create"))
    monkeypatch.setattr("tasks.progress.update_progress_artifact", api("update"))
    with caplog.at_level(logging.WARNING, logger="tasks.progress"):
        ec2, fleet = _launch(StageProgress(BP.name, "launch", min_interval_s=0.0, retry_after_s=0.0))
    assert len(fleet.nodes) == 4 and not fleet.replaced
    assert {i.state for i in ec2.describe()} == {"running"}
    assert calls.count(failing[0]) > 1  # every report tried the API again, and each one failed
    (warning,) = [r for r in caplog.records if r.name == "tasks.progress"]
    assert "sandbox-2p2d-launch-" in warning.getMessage() and "ReadTimeout" in warning.getMessage()
