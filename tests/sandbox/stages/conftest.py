"""Stage tests against the sandbox: a fresh account per test, the product pointed at it through
the standard AWS endpoint variables only."""

import datetime as dt
import itertools
from pathlib import Path

import pytest

from blueprints.loader import load_blueprint
from tasks.adapters.ledger_store import LedgerStore
from tasks.planning import identity
from tasks.runs import open_run
from tasks.wiring import Wiring

ROOT = Path(__file__).resolve().parents[3]
_RUN_IDS = itertools.count(1)


@pytest.fixture
def aws_env(aws_sandbox, monkeypatch, tmp_path):
    """A clean sandbox account, and this process configured for it the way an operator would."""
    aws_sandbox.admin.reset()
    aws_sandbox.admin.clear_requests()  # what provisioning the account asked for is not ours
    for key, value in aws_sandbox.env_vars.items():
        if key.startswith("AWS_") or key in ("PDLIFT_SSH_KEY_FILE", "KUBECONFIG"):
            monkeypatch.setenv(key, value)
    monkeypatch.setenv("PDLIFT_STATE_DIR", str(tmp_path / "state"))
    return aws_sandbox


@pytest.fixture
def bp():
    return load_blueprint(ROOT / "blueprints" / "sandbox-2p2d.yaml")


@pytest.fixture
def new_run(tmp_path):
    def make(blueprint, run_id=None):
        rid = run_id or f"t{next(_RUN_IDS):04d}"
        return open_run(blueprint, str(ROOT / "blueprints" / "sandbox-2p2d.yaml"), rid,
                        LedgerStore(tmp_path / "state"), now=dt.datetime.now(dt.timezone.utc))
    return make


def tagged(aws_env, deployment: str) -> dict[str, list[str]]:
    """Every live pdlift-tagged resource of a deployment, read straight from the EC2 API."""
    ec2 = aws_env.client("ec2")
    flt = identity.run_filters(deployment)
    out = {
        "instances": [i["InstanceId"] for r in ec2.describe_instances(Filters=flt)["Reservations"]
                      for i in r["Instances"] if i["State"]["Name"] != "terminated"],
        "reservations": [r["CapacityReservationId"] for r in ec2.describe_capacity_reservations(Filters=flt)
                         ["CapacityReservations"] if r["State"] in ("active", "pending", "scheduled")],
        "placement_groups": [g["GroupName"] for g in ec2.describe_placement_groups(Filters=flt)["PlacementGroups"]
                             if g.get("State") not in ("deleting", "deleted")],
        "launch_templates": [t["LaunchTemplateId"] for t in
                             ec2.describe_launch_templates(Filters=flt).get("LaunchTemplates", [])],
    }
    return {k: v for k, v in out.items() if v}


@pytest.fixture
def adapters(aws_env, bp):
    with Wiring(bp) as wiring:
        yield wiring
