"""`pdlift iam-policy`: the least-privilege IAM policy for exactly the AWS actions pdlift calls.

``tests/adapters/test_iam_policy.py`` holds this list to the code (every boto3 call in the
adapters is here, nothing else is) and to a sandbox run (every action it made is here).
"""

from __future__ import annotations

import json

# Actions the adapters call directly.
CALLED = {
    "ec2": [
        "DescribeInstanceTypes", "DescribeInstanceTypeOfferings", "DescribeSubnets", "DescribeSecurityGroups",
        "DescribePlacementGroups", "CreatePlacementGroup", "DeletePlacementGroup",
        "DescribeCapacityReservations", "CreateCapacityReservation", "CancelCapacityReservation",
        "DescribeCapacityBlockOfferings", "PurchaseCapacityBlock",
        "DescribeLaunchTemplates", "CreateLaunchTemplate", "DeleteLaunchTemplate",
        "RunInstances", "DescribeInstances", "TerminateInstances", "DescribeInstanceTopology", "GetConsoleOutput",
    ],
    "ssm": ["GetParameter"],
    "servicequotas": ["GetServiceQuota"],
    "eks": ["DescribeCluster"],
}

# Actions AWS checks on our behalf: tags given in TagSpecifications need CreateTags; the node
# instance profile needs PassRole; the EKS token is a presigned sts:GetCallerIdentity.
IMPLIED = {"ec2": ["CreateTags"], "iam": ["PassRole"], "sts": ["GetCallerIdentity"]}


def actions() -> list[str]:
    out = set()
    for group in (CALLED, IMPLIED):
        for service, names in group.items():
            out.update(f"{service}:{n}" for n in names)
    return sorted(out)


def policy() -> dict:
    describe = [a for a in actions() if a.split(":")[1].startswith(("Describe", "Get"))]
    mutate = [a for a in actions() if a not in describe and not a.startswith("iam:")]
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "PdliftRead", "Effect": "Allow", "Action": describe, "Resource": "*"},
            {"Sid": "PdliftProvision", "Effect": "Allow", "Action": mutate, "Resource": "*"},
            {"Sid": "PdliftPassNodeRole", "Effect": "Allow", "Action": ["iam:PassRole"], "Resource": "*",
             "Condition": {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}},
        ],
    }


def render() -> str:
    return json.dumps(policy(), indent=2)
