"""The status flow: what `pdlift status` prints, as a markdown artifact on the run (and its log)."""

from __future__ import annotations

from prefect import flow, get_run_logger

from tasks import status as status_tasks
from tasks.planning import status as view


@flow(name="status")
def status_flow(blueprint_path: str = "blueprints/sandbox-2p2d.yaml") -> dict:
    now = status_tasks.read(blueprint_path)
    status_tasks.publish(now)
    get_run_logger().info(view.render_text(now))
    return view.to_dict(now)
