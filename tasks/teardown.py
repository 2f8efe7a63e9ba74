"""Thin Prefect tasks for teardown and the leak sweep (``tasks.stages.teardown``)."""

from __future__ import annotations

import dataclasses
import datetime as dt

from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.runs import Run
from tasks.stages import teardown as stage
from tasks.wiring import RegionWiring, Wiring


@task(cache_policy=NO_CACHE)
def teardown(run: Run, run_id: str | None) -> stage.TeardownReport:
    """Release every resource tagged with this deployment (and run, when given)."""
    bp = run.blueprint
    with Wiring(bp) as wiring:
        found = stage.inventory(wiring.capacity, wiring.instances, bp.name, run_id)
        return stage.release(found, wiring.capacity, wiring.instances, kube=wiring.kube_nodes_or_none(),
                             deployments={bp.name})


@task(cache_policy=NO_CACHE)
def mark_released(run: Run, report: stage.TeardownReport) -> list[str]:
    """End what was released in each run's ledger (it stops billing there); the run ids touched."""
    touched, now = [], dt.datetime.now(dt.timezone.utc)
    for run_id in sorted({f.run_id for f in report.released if f.run_id}):
        ledger = run.store.load(run.blueprint.name, run_id)
        if ledger is None:
            continue
        for f in report.released:
            if f.run_id == run_id:
                ledger = ledger.ended(f.kind, f.resource_id, now)
        run.store.save(ledger)
        touched.append(run_id)
    return touched


@task(cache_policy=NO_CACHE)
def sweep(region: str, apply: bool, active_runs: list[str]) -> dict:
    """List pdlift-tagged resources past their TTL or of no active run; release them with apply."""
    wiring = RegionWiring(region)
    found = stage.inventory(wiring.capacity, wiring.instances, None, None)
    stale = stage.stale(found, dt.datetime.now(dt.timezone.utc), set(active_runs))
    report = stage.release(stale, wiring.capacity, wiring.instances) if apply and stale else None
    return {"found": [dataclasses.asdict(f) for f in found], "stale": [dataclasses.asdict(f) for f in stale],
            "released": report.lines() if report else []}
