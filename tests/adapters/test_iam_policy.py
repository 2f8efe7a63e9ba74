"""`pdlift iam-policy` names exactly the AWS actions the adapters call."""

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
