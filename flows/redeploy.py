"""Scheduled redeploy: onto the fleet a run already holds, re-stage the weights (only what changed
is fetched), bring the candidate up by the chosen strategy (``flows.update``), benchmark, gate,
promote or roll back."""

from __future__ import annotations

from prefect import flow

from flows.update import update
from tasks.planning.strategy import Strategy


@flow(name="redeploy", log_prints=True)
def redeploy(blueprint: str = "blueprints/sandbox-2p2d.yaml", fleet_run_id: str | None = None,
             strategy: Strategy = "auto") -> dict:
    """Args:
        blueprint: the blueprint.
        fleet_run_id: the run that holds the fleet (default: derived from the blueprint).
        strategy: auto (promotion.strategy, else the first that fits: blue-green, rolling,
            recreate, fleet), or one of them.
    """
    return update(blueprint, fleet_run_id, strategy)
