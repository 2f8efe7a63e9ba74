"""DescribeInstanceTopology: three layers, deterministic closeness, paging, late nodes."""

from __future__ import annotations

import time

import pytest
from botocore.exceptions import ClientError

from sandbox.aws.config import AwsConfig
from tests.sandbox.aws.helpers import error_code, launch


def topology(ec2, ids: list[str]) -> dict[str, list[str]]:
    found = ec2.describe_instance_topology(InstanceIds=ids)["Instances"]
    return {i["InstanceId"]: i["NetworkNodes"] for i in found}


def test_a_placement_group_shares_the_upper_layers_and_pairs_share_the_bottom_one(ec2):
    ec2.create_placement_group(GroupName="pg", Strategy="cluster")
    ids = launch(ec2, 4, Placement={"GroupName": "pg", "AvailabilityZone": "us-east-2a"})
    nodes = topology(ec2, ids)

    assert all(len(n) == 3 for n in nodes.values())
    assert len({n[0] for n in nodes.values()}) == 1
    assert len({n[1] for n in nodes.values()}) == 1
    # In launch order: instances 1-2 hang off one layer-3 node, 3-4 off another.
    bottoms = [nodes[i][2] for i in ids]
    assert bottoms[0] == bottoms[1] != bottoms[2] == bottoms[3]


def test_the_same_instances_get_the_same_answer_and_another_group_differs_below_the_top(ec2):
    ec2.create_placement_group(GroupName="a", Strategy="cluster")
    ec2.create_placement_group(GroupName="b", Strategy="cluster")
    in_a = launch(ec2, 2, Placement={"GroupName": "a", "AvailabilityZone": "us-east-2a"})
    in_b = launch(ec2, 2, Placement={"GroupName": "b", "AvailabilityZone": "us-east-2a"})
    first = topology(ec2, in_a + in_b)

    assert topology(ec2, in_a + in_b) == first
    assert first[in_a[0]][0] == first[in_b[0]][0]
    assert first[in_a[0]][1] != first[in_b[0]][1]


def test_topology_is_paged_and_filtered_by_group(ec2):
    ec2.create_placement_group(GroupName="pg", Strategy="cluster")
    ids = launch(ec2, 5, Placement={"GroupName": "pg"})
    launch(ec2, 1)  # not in the group

    seen: list[str] = []
    pages = 0
    for page in ec2.get_paginator("describe_instance_topology").paginate(
            GroupNames=["pg"], PaginationConfig={"PageSize": 2}):
        pages += 1
        seen += [i["InstanceId"] for i in page["Instances"]]

    assert sorted(seen) == sorted(ids)
    assert pages == 3


def test_max_results_cannot_be_combined_with_instance_ids(ec2):
    ids = launch(ec2, 1)
    with pytest.raises(ClientError) as exc:
        ec2.describe_instance_topology(InstanceIds=ids, MaxResults=5)
    assert error_code(exc) == "InvalidParameterCombination"


def test_terminated_instances_leave_the_topology(ec2):
    ids = launch(ec2, 2)
    ec2.terminate_instances(InstanceIds=ids[:1])
    assert list(topology(ec2, ids)) == ids[1:]


@pytest.mark.parametrize("aws_config", [AwsConfig(reservation_pending_seconds=0.0,
                                                  topology_empty_seconds=5.0)])
def test_network_nodes_are_empty_right_after_launch_when_configured(ec2):
    ids = launch(ec2, 1)
    assert topology(ec2, ids) == {ids[0]: []}
    deadline = time.monotonic() + 15
    while not topology(ec2, ids)[ids[0]] and time.monotonic() < deadline:
        time.sleep(0.25)
    assert len(topology(ec2, ids)[ids[0]]) == 3
