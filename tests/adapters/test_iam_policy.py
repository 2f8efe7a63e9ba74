"""`pdlift iam-policy` names exactly the AWS actions the adapters call."""

import json
import re
from pathlib import Path

from tasks.planning import iam

ADAPTERS = Path(__file__).resolve().parents[2] / "tasks" / "adapters"
CLIENT_ATTRS = {"_d": "ec2", "_c": "ec2", "_ssm": "ssm", "_quotas": "servicequotas", "eks_client": "eks"}


def _pascal(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def called_actions() -> set[str]:
    found = set()
    pattern = re.compile(r"(?:self\.(_d|_c|_ssm|_quotas)|(eks_client))\.([a-z_]+)")
    for path in ADAPTERS.glob("*.py"):
        for attr, eks, method in pattern.findall(path.read_text()):
            found.add(f"{CLIENT_ATTRS[attr or eks]}:{_pascal(method)}")
    return found


def test_every_boto3_call_in_the_adapters_is_in_the_policy():
    missing = called_actions() - set(iam.actions())
    assert not missing, f"add to tasks/planning/iam.py: {sorted(missing)}"


def test_the_policy_names_nothing_the_code_never_calls():
    implied = {f"{s}:{a}" for s, names in iam.IMPLIED.items() for a in names}
    unused = set(iam.actions()) - called_actions() - implied
    assert not unused, f"remove from tasks/planning/iam.py: {sorted(unused)}"


def test_pass_role_is_limited_to_ec2():
    (pass_role,) = [s for s in iam.policy()["Statement"] if s["Action"] == ["iam:PassRole"]]
    assert pass_role["Condition"]["StringEquals"]["iam:PassedToService"] == "ec2.amazonaws.com"


STATE_STORE = ADAPTERS / "state_store.py"
S3_ACTIONS = {"get_object": "s3:GetObject", "put_object": "s3:PutObject", "delete_object": "s3:DeleteObject",
              "list_objects_v2": "s3:ListBucket"}


def test_the_state_store_statements_cover_every_s3_call_of_the_store_and_only_its_prefix():
    text = STATE_STORE.read_text()
    called = set(re.findall(r"self\._s3\.([a-z_0-9]+)\(", text)) | set(re.findall(r'get_paginator\("([a-z_0-9]+)"\)',
                                                                                    text))
    called.discard("get_paginator")
    assert called and called <= set(S3_ACTIONS), f"map these S3 calls to IAM actions: {called - set(S3_ACTIONS)}"
    statements = iam.policy("s3://team-state/pdlift/prod")["Statement"]
    granted = {a: s for s in statements for a in s["Action"] if a.startswith("s3:")}
    assert {S3_ACTIONS[c] for c in called} == set(granted)
    assert granted["s3:PutObject"]["Resource"] == "arn:aws:s3:::team-state/pdlift/prod/*"
    assert granted["s3:ListBucket"]["Resource"] == "arn:aws:s3:::team-state"
    assert granted["s3:ListBucket"]["Condition"] == {"StringLike": {"s3:prefix": ["pdlift/prod", "pdlift/prod/*"]}}


def test_without_a_state_uri_the_policy_grants_no_s3():
    assert not [a for s in iam.policy()["Statement"] for a in s["Action"] if a.startswith("s3:")]
    assert not [a for s in iam.policy(None)["Statement"] for a in s["Action"] if a.startswith("s3:")]


WEIGHT_STORE = ADAPTERS / "s3.py"
S3_READS = {"head_object": "s3:GetObject"}  # HeadObject is authorised as s3:GetObject
WEIGHTS = "s3://team-weights/zai-org/GLM-5.1-FP8/"


def _granted(statements: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for s in statements:
        for a in s["Action"]:
            out.setdefault(a, []).append(s)
    return out


def test_the_weights_statements_cover_every_s3_call_of_the_weight_store_and_only_its_prefix():
    from tasks.planning.staging import HASH_FILE

    text = WEIGHT_STORE.read_text()
    called = set(re.findall(r"self\._s3\.([a-z_0-9]+)\(", text)) | set(re.findall(r'get_paginator\("([a-z_0-9]+)"\)',
                                                                                    text))
    called.discard("get_paginator")
    mapping = {**S3_ACTIONS, **S3_READS}
    assert called and called <= set(mapping), f"map these S3 calls to IAM actions: {called - set(mapping)}"
    granted = _granted(iam.policy(weights_uri=WEIGHTS)["Statement"])
    assert {mapping[c] for c in called} == {a for a in granted if a.startswith("s3:")}
    ((listing,), (read,), (write,)) = granted["s3:ListBucket"], granted["s3:GetObject"], granted["s3:PutObject"]
    assert listing["Resource"] == "arn:aws:s3:::team-weights"
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["zai-org/GLM-5.1-FP8/", "zai-org/GLM-5.1-FP8/*"]}}
    assert read["Resource"] == "arn:aws:s3:::team-weights/zai-org/GLM-5.1-FP8/*"
    assert iam.WEIGHTS_MANIFEST == HASH_FILE  # the one object pdlift writes beside the weights
    assert write["Resource"] == f"arn:aws:s3:::team-weights/zai-org/GLM-5.1-FP8/{HASH_FILE}"


def test_weights_at_the_bucket_root_need_no_prefix_condition_and_the_state_statements_stay():
    statements = iam.policy("s3://team-state/pdlift", "s3://team-weights")["Statement"]
    sids = [s["Sid"] for s in statements]
    assert {"PdliftStateObjects", "PdliftStateList", "PdliftWeightsList", "PdliftWeightsRead"} <= set(sids)
    (listing,) = [s for s in statements if s["Sid"] == "PdliftWeightsList"]
    assert "Condition" not in listing
    (write,) = [s for s in statements if s["Sid"] == "PdliftWeightsManifest"]
    assert write["Resource"] == "arn:aws:s3:::team-weights/pdlift-manifest.json"


def test_pdlift_iam_policy_of_a_blueprint_names_its_weights(capsys):
    from cli.main import main

    assert main(["iam-policy", str(ADAPTERS.parents[1] / "blueprints" / "glm51-fp8-2p2d.yaml")]) == 0
    statements = json.loads(capsys.readouterr().out)["Statement"]
    (read,) = [s for s in statements if s["Sid"] == "PdliftWeightsRead"]
    assert read["Resource"] == "arn:aws:s3:::pdlift-weights-use2/zai-org/GLM-5.1-FP8/*"
