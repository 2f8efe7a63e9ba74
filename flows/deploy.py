"""Stage 5 flow: bring up the candidate colour beside the live one and prove its KV path.

The production Service is left alone: promotion (the next stage) switches it after the gate.
"""

from __future__ import annotations

from prefect import flow

from tasks import capacity, deploy
from tasks.errors import StackNotReady


@flow(name="deploy")
def deploy_flow(blueprint_path: str, colour: str | None = None, run_id: str | None = None,
                rollback_on_failure: bool = False, poll_s: float = 5.0) -> dict:
    """Args:
        blueprint_path: the blueprint.
        colour: blue or green; default the colour the production Service does not select.
        run_id: the run whose ledger records the result (default: derived from the blueprint).
        rollback_on_failure: delete a failed candidate (default: keep it for inspection).
        poll_s: the longest gap between status polls while waiting.
    """
    run = capacity.start_run(blueprint_path, run_id)
    candidate = deploy.choose_colour(run.blueprint, colour)
    try:
        deployed = deploy.deploy_candidate(run, candidate, poll_s)
    except StackNotReady as e:
        if rollback_on_failure and not getattr(e, "applied_nothing", False):
            deploy.rollback_candidate(run.blueprint, candidate)
        raise
    deploy.publish(deployed)
    return {"run_id": run.identity.run_id, "deployment": deployed.deployment, "colour": deployed.colour,
            "live_colour": deployed.live_colour, "engines_namespace": deployed.engines_namespace,
            "router_service": f"{deployed.router_namespace}/{deployed.router_service}",
            "phases_s": deployed.phases_s, "bring_up_s": deployed.bring_up_s, "canary": deployed.canary}
