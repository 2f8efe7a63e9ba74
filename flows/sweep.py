"""Leak sweep: report (dry run, the default) or release pdlift resources past TTL or of no active run,
and each named blueprint's candidate colours that no run is left to decide on."""

from __future__ import annotations

from prefect import flow
from prefect.artifacts import create_table_artifact

from tasks import teardown
from tasks.planning import sweep_report


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
    candidates = [row for path in blueprint_paths or []
                  for row in teardown.sweep_candidates(path, apply, active_runs or [])]
    result = sweep_report.with_candidates(result, candidates)
    create_table_artifact(table=sweep_report.table(result), key="sweep-report")
    return result
