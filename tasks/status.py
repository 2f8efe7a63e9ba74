"""What a deployment has running now and what it costs (``pdlift status``, the ``status`` flow)."""

from __future__ import annotations

import datetime as dt

from prefect import task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from prefect.settings import get_current_settings

from blueprints.loader import load_blueprint
from tasks.adapters.prefect_runs import flow_run_ended
from tasks.planning import status as view
from tasks.planning.identity import artifact_key
from tasks.stages import status as stage
from tasks.wiring import Wiring


def current(blueprint_path: str, now: dt.datetime | None = None) -> view.Status:
    """Read it all now (plain function: the CLI calls it without a Prefect API)."""
    bp = load_blueprint(blueprint_path, to_release=True)  # reads only: what is there, and how to release it
    with Wiring(bp) as wiring:
        return stage.gather(bp, blueprint_path, wiring.state, wiring.ledgers, wiring.leases(),
                            lambda: wiring.capacity, lambda: wiring.instances, lambda: wiring.kube,
                            now or dt.datetime.now(dt.timezone.utc), get_current_settings().ui_url,
                            lambda flow_run_id: flow_run_ended(flow_run_id, temporary_server=False))


@task(cache_policy=NO_CACHE)
def read(blueprint_path: str) -> view.Status:
    return current(blueprint_path)


@task(cache_policy=NO_CACHE)
def publish(status: view.Status) -> str:
    markdown = view.render_markdown(status)
    create_markdown_artifact(markdown=markdown, key=artifact_key("status", status.deployment),
                             description=f"{status.deployment}: ${status.usd_per_hour:,.2f}/h now")
    return markdown
