"""Thin Prefect tasks for stage 1: preflight, then reserve capacity (``tasks.stages.reserve``), and
the note a run publishes while it waits for its Capacity Block to begin."""

from __future__ import annotations

from prefect import task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from tasks.errors import retry_if_transient
from tasks.planning import ledger as ledger_plan
from tasks.planning.identity import artifact_key
from tasks.planning.records import Reserved
from tasks.planning.resume import CapacityWait
from tasks.runs import Run
from tasks.stages import reserve as stage
from tasks.wiring import Wiring


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[5, 30], retry_condition_fn=retry_if_transient)
def preflight(run: Run) -> list[str]:
    with Wiring(run.blueprint) as wiring:
        return stage.preflight(run.blueprint, wiring.capacity)


# The retries are the blueprint's (aws.capacity.retry_delays_s, set by flows/reserve.py); these are its defaults.
@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[10, 60], retry_condition_fn=retry_if_transient)
def reserve(run: Run) -> Reserved:
    run.reload()  # the token generations a crashed attempt recorded
    with Wiring(run.blueprint) as wiring:
        return stage.reserve(run.blueprint, run.identity, wiring.capacity, run.record,
                             generations=ledger_plan.generations(run.ledger))


@task(cache_policy=NO_CACHE)
def publish_capacity_wait(run: Run, wait: CapacityWait, how: str) -> str:
    """A markdown artifact: when the capacity begins, when the run resumes, what it costs meanwhile."""
    markdown = wait.markdown(run.blueprint.name, run.run_id, how)
    create_markdown_artifact(markdown=markdown, key=artifact_key("capacity-wait", run.blueprint.name),
                             description=f"run {run.run_id} waits for its Capacity Block")
    return markdown
