"""A rollout without a fleet run id updates the fleet its own blueprint holds, not a run the
overridden blueprint would derive (an image override changes the derived run id)."""

from __future__ import annotations

from blueprints.loader import load_blueprint
from tasks import rollout as rollout_tasks
from tasks.runs import run_id_of

SANDBOX = "blueprints/sandbox-2p2d.yaml"
IMAGE = "public.ecr.aws/deep-learning-containers/vllm@sha256:" + "ab" * 32


def test_a_rollout_without_a_run_id_goes_to_the_fleet_of_the_blueprint_it_was_given(tmp_path, monkeypatch):
    monkeypatch.setenv("PDLIFT_STATE_DIR", str(tmp_path))
    derived = rollout_tasks.derive_blueprint.fn(SANDBOX, None, IMAGE, None)
    fleet = run_id_of(load_blueprint(SANDBOX))
    assert run_id_of(load_blueprint(derived)) != fleet  # what the derived blueprint alone would name
    assert rollout_tasks.fleet_run.fn(SANDBOX, None) == fleet
    assert rollout_tasks.fleet_run.fn(SANDBOX, "r-given") == "r-given"
