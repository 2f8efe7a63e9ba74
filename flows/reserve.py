"""Stage 1 flow: preflight, then reserve capacity (adopting what this run already made)."""

from __future__ import annotations

from prefect import flow, get_run_logger

from flows import pipeline
from tasks import pipeline as pipeline_tasks
from tasks import reserve
from tasks.planning.records import Reserved


@flow(name="reserve-capacity")
def reserve_flow(blueprint_path: str, run_id: str | None = None) -> Reserved:
    run = pipeline.start(blueprint_path, run_id)
    for note in reserve.preflight(run):
        get_run_logger().info("preflight: %s", note)
    # Capacity often frees up within minutes: the blueprint says how long to keep asking.
    delays = run.blueprint.aws.capacity.retry_delays_s
    reserved = pipeline.done(run, reserve.reserve.with_options(retries=len(delays), retry_delay_seconds=delays)(run))
    if reserved.starts_at or reserved.ends_at:
        get_run_logger().info("%s %s usable from %s until %s", "Capacity Block" if reserved.capacity_block else
                              "reservation", reserved.reservation_id, reserved.starts_at or "now",
                              reserved.ends_at or "cancelled")
    pipeline_tasks.publish_ledger(run)
    return reserved
