"""Teardown flow: release everything tagged with the deployment (or one run of it)."""

from __future__ import annotations

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact

from tasks import capacity


@flow(name="teardown")
def teardown_flow(blueprint_path: str, run_id: str | None = None) -> list[str]:
    report = capacity.teardown(blueprint_path, run_id)
    lines = report.lines() or ["nothing to release"]
    for line in lines:
        get_run_logger().info(line)
    create_markdown_artifact(markdown="## Teardown\n\n" + "\n".join(f"- {l}" for l in lines),
                             key="teardown-report")
    capacity.publish_ledgers(blueprint_path, sorted({f.run_id for f in report.released if f.run_id}))
    return lines
