"""Stage 2 flow: launch the gang into the reservation, join EKS, label by topology and role."""

from __future__ import annotations

from prefect import flow

from flows import pipeline
from tasks import launch
from tasks import pipeline as pipeline_tasks
from tasks.planning.records import Fleet


@flow(name="launch-nodes")
def launch_flow(blueprint_path: str, run_id: str | None = None) -> Fleet:
    run = pipeline.start(blueprint_path, run_id)
    fleet = pipeline.done(run, launch.launch(run))
    pipeline_tasks.publish_ledger(run)
    return fleet
