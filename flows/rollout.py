"""API-driven rollout of a new engine image or model revision onto an existing fleet.

Start it through the Prefect API with an idempotency key (POST
/api/deployments/{id}/create_flow_run with "idempotency_key"): the same key twice gives one run.
The override becomes a derived blueprint, so every stage sees one consistent input.
"""

from __future__ import annotations

from prefect import flow

from flows.update import update
from tasks import rollout as rollout_tasks
from tasks.planning.strategy import Strategy


@flow(name="rollout", log_prints=True)
def rollout(blueprint: str = "blueprints/sandbox-2p2d.yaml", fleet_run_id: str | None = None,
            engine_image: str | None = None, model_revision: str | None = None, strategy: Strategy = "auto") -> dict:
    derived = rollout_tasks.derive_blueprint(blueprint, fleet_run_id, engine_image, model_revision)
    return update(derived, rollout_tasks.fleet_run(blueprint, fleet_run_id), strategy)
