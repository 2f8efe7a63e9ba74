"""Stage 3 flow: prove the EFA fabric of the run's fleet, replacing bad nodes, or stop."""

from __future__ import annotations

from prefect import flow

from flows import pipeline
from tasks import fabric
from tasks import pipeline as pipeline_tasks
from tasks.planning.records import FabricVerdict


@flow(name="validate-fabric")
def fabric_flow(blueprint_path: str, run_id: str | None = None) -> FabricVerdict:
    """Args:
        blueprint_path: the blueprint (fabric floors and timeouts, aws.ssh).
        run_id: the run whose launched fleet to validate (default: derived from the blueprint).
    """
    run = pipeline.start(blueprint_path, run_id)
    try:
        verdict = pipeline.done(run, fabric.validate(run))
    finally:
        pipeline_tasks.publish_ledger(run)  # replacements change what the run spends
    verdict.raise_for_failure()  # recorded first: a failed run still knows which nodes it holds
    return verdict
