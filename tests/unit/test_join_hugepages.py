"""The join check asks for the 2 MiB hugepages every engine pod requests, and names the fix when a node has too few."""

from __future__ import annotations

from fractions import Fraction

import pytest

from tasks.adapters.kube_nodes import NodeRecord
from tasks.errors import StageFailed
from tasks.planning import quantity
from tasks.planning.manifests.common import HUGEPAGES, HUGEPAGES_SIZE, engine_resources
from tests.unit.test_node_lifecycle import BP, FakeClock, FakeEc2, FakeKube, lifecycle, states

GPUS_AND_EFA = {"nvidia.com/gpu": str(BP.fabric.gpus), "vpc.amazonaws.com/efa": str(BP.fabric.efa_devices)}


def node(hugepages: str | None) -> NodeRecord:
    allocatable = dict(GPUS_AND_EFA, **({HUGEPAGES: hugepages} if hugepages is not None else {}))
    return NodeRecord("ip-10-0-0-1", "i-0001", {}, True, allocatable)


def test_the_check_asks_for_what_an_engine_pod_requests():
    assert engine_resources(BP)["requests"][HUGEPAGES] == HUGEPAGES_SIZE == "5Gi"


@pytest.mark.parametrize("allocatable", ["5Gi", "5120Mi", "5368709120", "10Gi"])
def test_a_node_with_at_least_the_request_has_joined(allocatable):
    nodes, _, _ = lifecycle(FakeEc2())
    assert nodes.joined(node(allocatable))


@pytest.mark.parametrize("allocatable", ["5118Mi", "5368709119", "0", None, "lots"])  # one page, one byte short
def test_a_node_with_less_has_not_and_the_reason_names_the_node_and_the_fix(allocatable):
    nodes, _, _ = lifecycle(FakeEc2())
    why = nodes.not_joined(node(allocatable))
    assert not nodes.joined(node(allocatable))
    assert "ip-10-0-0-1 (i-0001)" in why and f"requests {HUGEPAGES_SIZE}" in why
    assert "preallocate 2 MiB hugepages at boot, at least 2560" in why and "user data" in why


class ShortKube(FakeKube):
    """EKS where the nodes of the instances in ``short`` report ``pool`` of 2 MiB hugepages."""

    def __init__(self, ec2, short: set[str], pool: str = "0"):
        super().__init__(ec2)
        self.short, self.pool = short, pool

    def nodes(self, label_selector: str = ""):
        return [NodeRecord(n.name, n.instance_id, n.labels, n.ready,
                           {**n.allocatable, HUGEPAGES: self.pool} if n.instance_id in self.short else n.allocatable)
                for n in super().nodes(label_selector)]


def test_a_gang_whose_only_missing_node_lacks_hugepages_fails_at_once_and_terminates_it():
    ec2, clock = FakeEc2(), FakeClock()
    nodes, _, ended = lifecycle(ec2, clock, ShortKube(ec2, {"i-0002"}))
    launched = nodes.launch({"LaunchTemplate": {}, "MinCount": 4, "MaxCount": 4, "ClientToken": "gang"}, 4, "launch")
    with pytest.raises(StageFailed, match=r"ip-i-0002 \(i-0002\) is Ready but has 0 hugepages-2Mi allocatable") as e:
        nodes.wait_joined([i.instance_id for i in launched])
    assert "a replacement would boot the same way" in str(e.value)
    assert clock.t < BP.aws.eks.join_timeout_s / 10  # no waiting out the join timeout for what cannot change
    assert ended == ["i-0002"] and states(ec2, "i-0002") != ["running"]


def test_a_node_short_of_hugepages_beside_one_not_registered_yet_is_waited_for_and_both_are_named():
    ec2, clock = FakeEc2(), FakeClock()
    kube = ShortKube(ec2, {"i-0001"}, pool="5118Mi")
    nodes, _, _ = lifecycle(ec2, clock, kube)
    launched = nodes.launch({"LaunchTemplate": {}, "MinCount": 2, "MaxCount": 2, "ClientToken": "pair"}, 2, "launch")
    kube.nodes()  # both registered once running; then i-0002's record is gone for good
    kube._joined.discard("i-0002")
    kube.never_join = True
    missing = nodes.wait_joined([i.instance_id for i in launched])
    assert missing == ["i-0001", "i-0002"] and clock.t >= BP.aws.eks.join_timeout_s
    message = str(nodes.join_failure(missing))
    assert "i-0001: node ip-i-0001 (i-0001) is Ready but has 5118Mi" in message
    assert "i-0002: no EKS node registered" in message and "5Gi hugepages-2Mi" in message


@pytest.mark.parametrize("text, value", [("5Gi", 5 << 30), ("5120Mi", 5 << 30), ("2560", 2560),
                                         ("500m", Fraction(1, 2)), ("1.5Ki", 1536), ("5e3", 5000), ("2k", 2000),
                                         ("1E", 10 ** 18)])
def test_quantities_parse_exactly(text, value):
    assert quantity.parse(text) == value


@pytest.mark.parametrize("text", ["", "Gi", "5 Gi", "5GB", "0x10"])
def test_what_kubernetes_would_not_parse_is_refused(text):
    with pytest.raises(ValueError):
        quantity.parse(text)
