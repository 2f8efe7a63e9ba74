"""Topology depth as EC2 reports it per instance type, and the EKS labels a node gets for every layer."""

from __future__ import annotations

from sandbox.aws.topology import Topology
from sandbox.nodes.records import join_record
from sandbox.nodes.userdata import NodeJoin


def test_p5en_gets_three_network_nodes_and_p6_b200_four_with_pairs_sharing_the_bottom_one():
    topo = Topology("123456789012", pair_size=2)
    p5en = [topo.assign("us-east-2a", "pg-a", "p5en.48xlarge") for _ in range(3)]
    p6 = [topo.assign("us-east-2a", "pg-b", "p6-b200.48xlarge") for _ in range(3)]
    assert {len(n) for n in p5en} == {3} and {len(n) for n in p6} == {4}
    for nodes in (p5en, p6):
        assert nodes[0][:-1] == nodes[2][:-1]  # the group shares every layer above the bottom
        assert nodes[0][-1] == nodes[1][-1] != nodes[2][-1]


def test_a_node_is_labelled_with_every_layer_it_has():
    record = join_record(instance_id="i-0p6", address="127.0.0.99", hostname="ip-127-0-0-99",
                         instance_type="p6-b200.48xlarge", region="us-east-2",
                         network_nodes=["nn-1", "nn-2", "nn-3", "nn-4"], join=NodeJoin(cluster="c"), faults={},
                         zone="us-east-2a")
    assert [record["labels"].get(f"topology.k8s.aws/network-node-layer-{i}") for i in (1, 2, 3, 4)] == \
        ["nn-1", "nn-2", "nn-3", "nn-4"]
