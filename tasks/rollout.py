"""Rollout inputs: a blueprint derived from the fleet's with a new engine image or model revision."""

from __future__ import annotations

import hashlib

import yaml
from prefect import task
from prefect.cache_policies import NO_CACHE

from blueprints.loader import load_blueprint, parse_blueprint
from tasks.adapters.ledger_store import write_atomic
from tasks.runs import run_id_of
from tasks.wiring import Wiring


@task(cache_policy=NO_CACHE)
def fleet_run(blueprint_path: str, fleet_run_id: str | None) -> str:
    """The run that holds the fleet: ``fleet_run_id``, else the one the fleet's own blueprint
    derives (not the derived blueprint's: its overrides change the derived run id)."""
    return run_id_of(load_blueprint(blueprint_path), fleet_run_id)


@task(cache_policy=NO_CACHE)
def derive_blueprint(blueprint_path: str, fleet_run_id: str | None, engine_image: str | None,
                     model_revision: str | None) -> str:
    """Write the derived blueprint under the state dir; returns its path (validated on the way)."""
    bp = load_blueprint(blueprint_path)
    data = bp.model_dump(mode="json", by_alias=True, exclude_none=True)
    if engine_image:
        data["engine"]["image"] = engine_image
    if model_revision:
        data["model"]["revision"] = model_revision
    text = yaml.safe_dump(data, sort_keys=False)
    parse_blueprint(text, f"{blueprint_path} + rollout overrides")  # refuse a bad override here
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    out = Wiring(bp).state_root / "runs" / bp.name / "rollouts" / f"{digest}.yaml"
    write_atomic(out, text)
    return str(out)
