"""Placement groups through boto3 (Capacity Blocks: test_aws_capacity_blocks.py)."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from tests.sandbox.aws.helpers import error_code, launch


def test_a_placement_group_lives_until_deleted_and_names_are_unique(ec2):
    tags = [{"ResourceType": "placement-group", "Tags": [{"Key": "pdlift/run", "Value": "r1"}]}]
    made = ec2.create_placement_group(GroupName="pg", Strategy="cluster",
                                      TagSpecifications=tags)["PlacementGroup"]
    with pytest.raises(ClientError) as duplicate:
        ec2.create_placement_group(GroupName="pg", Strategy="cluster")

    found = ec2.describe_placement_groups(GroupNames=["pg"])["PlacementGroups"]
    by_tag = ec2.describe_placement_groups(
        Filters=[{"Name": "tag:pdlift/run", "Values": ["r1"]}])["PlacementGroups"]
    ec2.delete_placement_group(GroupName="pg")
    with pytest.raises(ClientError) as gone:
        ec2.describe_placement_groups(GroupNames=["pg"])
    with pytest.raises(ClientError) as delete_again:
        ec2.delete_placement_group(GroupName="pg")

    assert made["GroupArn"].endswith(":placement-group/pg")
    assert found[0]["Strategy"] == "cluster" and found[0]["State"] == "available"
    assert [g["GroupId"] for g in by_tag] == [made["GroupId"]]
    assert error_code(duplicate) == "InvalidPlacementGroup.Duplicate"
    assert error_code(gone) == "InvalidPlacementGroup.Unknown"
    assert error_code(delete_again) == "InvalidPlacementGroup.Unknown"


def test_a_placement_group_is_in_use_while_its_instances_run(ec2):
    ec2.create_placement_group(GroupName="pg", Strategy="cluster")
    ids = launch(ec2, 2, Placement={"GroupName": "pg"})
    with pytest.raises(ClientError) as in_use:
        ec2.delete_placement_group(GroupName="pg")
    ec2.terminate_instances(InstanceIds=ids)

    assert error_code(in_use) == "InvalidPlacementGroup.InUse"
    ec2.delete_placement_group(GroupName="pg")


def test_launching_into_an_unknown_placement_group_is_refused(ec2):
    with pytest.raises(ClientError) as exc:
        launch(ec2, 1, Placement={"GroupName": "nope"})
    assert error_code(exc) == "InvalidPlacementGroup.Unknown"
