"""Teardown flow: release everything tagged with the deployment (or one run of it).

It reads the blueprint and the resources' tags, not the ledger: a ledger that cannot be read
never keeps capacity billing. The ledgers it can read get end times and a teardown record.
"""

from __future__ import annotations

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact

from flows import pipeline
from tasks import pipeline as pipeline_tasks
from tasks import plan as plan_tasks
from tasks import teardown
from tasks.planning.records import TornDown


@flow(name="teardown")
def teardown_flow(blueprint_path: str, run_id: str | None = None) -> list[str]:
    bp = plan_tasks.load(blueprint_path, to_release=True)  # an older blueprint still names its fleet
    report = teardown.teardown(bp, run_id)
    lines = report.lines() or ["nothing to release"]
    for line in lines:
        get_run_logger().info(line)
    create_markdown_artifact(markdown="## Teardown\n\n" + "\n".join(f"- {l}" for l in lines),
                             key="teardown-report")
    touched = teardown.mark_released(bp, report)
    runs = [pipeline.start(blueprint_path, rid, hold=False) for rid in touched]
    for run in runs:
        pipeline.done(run, TornDown(len(report.released)))
    pipeline_tasks.publish_ledgers(runs)
    return lines
