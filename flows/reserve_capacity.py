"""Stage 1 flow: preflight, then reserve capacity (adopting what this run already made)."""

from __future__ import annotations

from prefect import flow, get_run_logger

from tasks import capacity


@flow(name="reserve-capacity")
def reserve_capacity_flow(blueprint_path: str, run_id: str | None = None) -> dict:
    run = capacity.start_run(blueprint_path, run_id)
    for note in capacity.preflight(run):
        get_run_logger().info("preflight: %s", note)
    reserved = capacity.reserve(run)
    capacity.publish_ledger(run)
    return {"run_id": run.identity.run_id, "reservation_id": reserved.reservation_id, "zone": reserved.zone,
            "blocked_zones": list(reserved.blocked_zones), "adopted": reserved.adopted}
