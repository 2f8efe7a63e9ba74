"""Leak sweep: report (dry run, the default) or release pdlift resources past TTL or of no active run,
and each named blueprint's candidate colours that no run is left to decide on."""

from __future__ import annotations

from prefect import flow
from prefect.artifacts import create_table_artifact

from tasks import teardown


@flow(name="sweep")
def sweep_flow(region: str = "us-east-2", apply: bool = False, active_runs: list[str] | None = None,
               blueprint_paths: list[str] | None = None) -> dict:
    """Args:
        region: where to list pdlift-tagged EC2 resources.
        apply: release (delete) what is found; default a dry run that only reports.
        active_runs: run ids whose resources are kept whatever their TTL.
        blueprint_paths: deployments whose Kubernetes colours to check too: a colour production
            does not route to that nobody is left to decide on (a gate approval that timed out
            while suspended, a worker lost between a FAIL and its rollback) is listed, and deleted
            with apply; one that is kept says why (``tasks.planning.leftovers``).
    """
    result = teardown.sweep(region, apply, active_runs or [])
    result["candidates"] = [row for path in blueprint_paths or []
                            for row in teardown.sweep_candidates(path, apply, active_runs or [])]
    result["stale"] = result["stale"] + [row for row in result["candidates"] if row["action"] != "kept"]
    rows = [{"kind": f["kind"], "id": f["resource_id"], "deployment": f["deployment"], "run": f["run_id"],
             "created": f["created_at"], "ttl_h": f["ttl_hours"],
             "action": f["action"]} for f in result["stale"]]
    rows += [{"kind": c["kind"], "id": c["resource_id"], "deployment": c["deployment"], "run": "", "created": "",
              "ttl_h": "", "action": f"kept: {c['why']}"} for c in result["candidates"] if c["action"] == "kept"]
    create_table_artifact(table=rows or [{"kind": "-", "id": "nothing stale"}], key="sweep-report")
    return result
