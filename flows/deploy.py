"""Stage 5 flow: bring up the candidate colour beside the live one and prove its KV path.

The production Service is left alone: promotion (the next stage) switches it after the gate.
"""

from __future__ import annotations

from prefect import flow

from flows import pipeline
from tasks import deploy
from tasks.errors import StackFailure, StackNotReady
from tasks.planning.records import Deployed


@flow(name="deploy")
def deploy_flow(blueprint_path: str, run_id: str | None = None, *, colour: str | None = None,
                rollback_on_failure: bool = False, poll_s: float = 5.0, pin_to_fleet: bool = False) -> Deployed:
    """Args:
        blueprint_path: the blueprint.
        run_id: the run whose ledger records the result (default: derived from the blueprint).
        colour: blue or green; default the colour the production Service does not select.
        rollback_on_failure: delete a failed candidate (default: keep it for inspection).
        poll_s: the longest gap between status polls while waiting.
        pin_to_fleet: the engines on the nodes this run launched only (a ``fleet`` update brings
            its candidate up on a second fleet beside the first).
    """
    run = pipeline.start(blueprint_path, run_id)
    candidate = deploy.choose_colour(run, colour)
    try:
        deployed = deploy.deploy(run, candidate, poll_s, pin_to_fleet)
    except StackNotReady as e:
        refused_before_any_apply = isinstance(e, StackFailure) and e.applied_nothing
        if rollback_on_failure and not refused_before_any_apply:
            deploy.rollback(run, candidate, wait_s=300.0)
        raise
    pipeline.done(run, deployed)  # recorded first: the candidate is up whether or not its artifact is
    deploy.publish(deployed)
    return deployed
