"""Leak sweep: report (dry run, the default) or release pdlift resources past TTL or of no active run."""

from __future__ import annotations

from prefect import flow
from prefect.artifacts import create_table_artifact

from tasks import teardown


@flow(name="sweep")
def sweep_flow(region: str = "us-east-2", apply: bool = False, active_runs: list[str] | None = None) -> dict:
    result = teardown.sweep(region, apply, active_runs or [])
    rows = [{"kind": f["kind"], "id": f["resource_id"], "deployment": f["deployment"], "run": f["run_id"],
             "created": f["created_at"], "ttl_h": f["ttl_hours"],
             "action": f["action"]} for f in result["stale"]]
    create_table_artifact(table=rows or [{"kind": "-", "id": "nothing stale"}], key="sweep-report")
    return result
