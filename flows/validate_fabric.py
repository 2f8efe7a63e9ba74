"""Stage 3 flow: prove the EFA fabric of the launched fleet, replacing bad nodes, or stop."""

from __future__ import annotations

from prefect import flow

from tasks import capacity, fabric


@flow(name="validate-fabric")
def validate_fabric_flow(blueprint_path: str, run_id: str | None = None) -> dict:
    """Args:
        blueprint_path: the blueprint (fabric floors and timeouts, aws.ssh).
        run_id: the run whose launched fleet to validate (default: derived from the blueprint).
    """
    run = capacity.start_run(blueprint_path, run_id)
    try:
        return fabric.validate_fabric(run)
    finally:
        capacity.publish_ledger(run)  # replacements change what the run spends
