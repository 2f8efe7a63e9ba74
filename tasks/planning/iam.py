"""`pdlift iam-policy`: the least-privilege IAM policy for exactly the AWS actions pdlift calls.

``tests/adapters/test_iam_policy.py`` holds this list to the code (every boto3 call in the
adapters is here, nothing else is) and to sandbox runs (every EC2/EKS action a stage made, and
every S3 request the weights manifest and the node stager sent, is allowed for its resource:
tests/sandbox/stages/test_launch.py, test_reserve.py, tests/sandbox/staging/test_s3_requests_in_policy.py).
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


# The shared state store (``tasks.adapters.state_store.S3Store``), when the blueprint sets
# state.uri: objects under its prefix, and listing that prefix. Conditional writes (If-Match,
# If-None-Match) need nothing beyond s3:PutObject.
STATE_OBJECT_ACTIONS = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"]
STATE_LIST_ACTIONS = ["s3:ListBucket"]


def state_statements(state_uri: str) -> list[dict]:
    """Least privilege on ``s3://bucket/prefix`` for the state store."""
    bucket, _, prefix = state_uri.removeprefix("s3://").partition("/")
    prefix = prefix.strip("/")
    objects = f"arn:aws:s3:::{bucket}/{prefix}/*" if prefix else f"arn:aws:s3:::{bucket}/*"
    listing: dict = {"Sid": "PdliftStateList", "Effect": "Allow", "Action": STATE_LIST_ACTIONS,
                     "Resource": f"arn:aws:s3:::{bucket}"}
    if prefix:
        listing["Condition"] = {"StringLike": {"s3:prefix": [prefix, f"{prefix}/*"]}}
    return [{"Sid": "PdliftStateObjects", "Effect": "Allow", "Action": STATE_OBJECT_ACTIONS, "Resource": objects},
            listing]


# The weights (``tasks.adapters.s3.WeightStore`` and the node stager, scripts/node/stager_s3.py):
# ListObjectsV2 is s3:ListBucket on the bucket, for the weights prefix only; HeadObject and
# GetObject (ranged too) are s3:GetObject; the one write is PutObject of pdlift-manifest.json
# beside the weights (`pdlift weights manifest`). S3's action list ("Actions, resources, and
# condition keys for Amazon S3"): HeadObject needs s3:GetObject, ListObjectsV2 s3:ListBucket.
WEIGHTS_LIST_ACTIONS = ["s3:ListBucket"]
WEIGHTS_READ_ACTIONS = ["s3:GetObject"]
WEIGHTS_WRITE_ACTIONS = ["s3:PutObject"]
WEIGHTS_MANIFEST = "pdlift-manifest.json"  # tasks.planning.staging.HASH_FILE (a test holds them equal)


def weights_statements(weights_uri: str) -> list[dict]:
    """Least privilege on ``s3://bucket/prefix/`` for the weights. The node role needs the read
    and list statements too where the stager signs with the instance profile."""
    bucket, _, prefix = weights_uri.removeprefix("s3://").partition("/")
    prefix = prefix.strip("/")
    under = f"{prefix}/" if prefix else ""  # the Prefix ListObjectsV2 sends (staging.split_s3_uri)
    listing: dict = {"Sid": "PdliftWeightsList", "Effect": "Allow", "Action": WEIGHTS_LIST_ACTIONS,
                     "Resource": f"arn:aws:s3:::{bucket}"}
    if under:
        listing["Condition"] = {"StringLike": {"s3:prefix": [under, f"{under}*"]}}
    return [listing,
            {"Sid": "PdliftWeightsRead", "Effect": "Allow", "Action": WEIGHTS_READ_ACTIONS,
             "Resource": f"arn:aws:s3:::{bucket}/{under}*"},
            {"Sid": "PdliftWeightsManifest", "Effect": "Allow", "Action": WEIGHTS_WRITE_ACTIONS,
             "Resource": f"arn:aws:s3:::{bucket}/{under}{WEIGHTS_MANIFEST}"}]


def actions() -> list[str]:
    out = set()
    for group in (CALLED, IMPLIED):
        for service, names in group.items():
            out.update(f"{service}:{n}" for n in names)
    return sorted(out)


def policy(state_uri: str | None = None, weights_uri: str | None = None) -> dict:
    """The policy; with ``state_uri`` (s3://bucket/prefix) also the state store's statements, with
    ``weights_uri`` (the blueprint's model.weights_uri) the weights'."""
    describe = [a for a in actions() if a.split(":")[1].startswith(("Describe", "Get"))]
    mutate = [a for a in actions() if a not in describe and not a.startswith("iam:")]
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "PdliftRead", "Effect": "Allow", "Action": describe, "Resource": "*"},
            {"Sid": "PdliftProvision", "Effect": "Allow", "Action": mutate, "Resource": "*"},
            {"Sid": "PdliftPassNodeRole", "Effect": "Allow", "Action": ["iam:PassRole"], "Resource": "*",
             "Condition": {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}},
        ] + (state_statements(state_uri) if state_uri and state_uri.startswith("s3://") else [])
          + (weights_statements(weights_uri) if weights_uri and weights_uri.startswith("s3://") else []),
    }


def render(state_uri: str | None = None, weights_uri: str | None = None) -> str:
    return json.dumps(policy(state_uri, weights_uri), indent=2)
