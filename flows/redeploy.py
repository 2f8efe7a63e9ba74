"""Scheduled redeploy: onto the fleet a run already holds, re-stage the weights (only what changed
is fetched), bring up the other colour, benchmark, gate, promote or roll back."""

from __future__ import annotations

from prefect import flow

from flows.migrate import REDEPLOY_STAGES, MigrateParams, migrate


@flow(name="redeploy", log_prints=True)
def redeploy(blueprint: str = "blueprints/sandbox-2p2d.yaml", fleet_run_id: str | None = None) -> dict:
    return migrate(MigrateParams(blueprint=blueprint, run_id=fleet_run_id,
                                 stages=REDEPLOY_STAGES, rerun=REDEPLOY_STAGES))
