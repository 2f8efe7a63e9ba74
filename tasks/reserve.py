"""Thin Prefect tasks for stage 1: preflight, then reserve capacity (``tasks.stages.reserve``)."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.errors import retry_if_transient
from tasks.planning.records import Reserved
from tasks.runs import Run
from tasks.stages import reserve as stage
from tasks.wiring import Wiring


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[5, 30], retry_condition_fn=retry_if_transient)
def preflight(run: Run) -> list[str]:
    with Wiring(run.blueprint) as wiring:
        return stage.preflight(run.blueprint, wiring.capacity)


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[10, 60], retry_condition_fn=retry_if_transient)
def reserve(run: Run) -> Reserved:
    with Wiring(run.blueprint) as wiring:
        return stage.reserve(run.blueprint, run.identity, wiring.capacity, run.record)
