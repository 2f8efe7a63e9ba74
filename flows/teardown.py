"""Teardown flow: release everything tagged with the deployment (or one run of it)."""

from __future__ import annotations

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact

from flows import pipeline
from tasks import pipeline as pipeline_tasks
from tasks import teardown
from tasks.planning.records import TornDown


@flow(name="teardown")
def teardown_flow(blueprint_path: str, run_id: str | None = None) -> list[str]:
    run = pipeline.start(blueprint_path, run_id)
    report = teardown.teardown(run, run_id)
    lines = report.lines() or ["nothing to release"]
    for line in lines:
        get_run_logger().info(line)
    create_markdown_artifact(markdown="## Teardown\n\n" + "\n".join(f"- {l}" for l in lines),
                             key="teardown-report")
    touched = teardown.mark_released(run, report)
    for rid in touched:
        pipeline.done(pipeline.start(blueprint_path, rid), TornDown(len(report.released)))
    pipeline_tasks.publish_ledgers(run, touched)
    return lines
