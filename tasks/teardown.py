"""Thin Prefect tasks for teardown and the leak sweep (``tasks.stages.teardown``)."""

from __future__ import annotations

import dataclasses
import datetime as dt

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from blueprints.schema import Blueprint
from tasks.errors import ConfigError
from tasks.planning import fleet_swap
from tasks.stages import teardown as stage
from tasks.wiring import RegionWiring, Wiring


@task(cache_policy=NO_CACHE)
def teardown(bp: Blueprint, run_id: str | None) -> stage.TeardownReport:
    """Release every resource tagged with this deployment (and run, when given). Reads no ledger:
    tags are the truth, so an unreadable ledger never keeps capacity billing."""
    with Wiring(bp) as wiring:
        found = []
        for rid in [run_id] + (_successors(wiring, bp, run_id) if run_id else []):
            found += stage.inventory(wiring.capacity, wiring.instances, bp.name, rid)
        kube, why_not = wiring.kube_nodes_for_cleanup()
        report = stage.release(found, wiring.capacity, wiring.instances, kube=kube, deployments={bp.name})
    if why_not:
        report.kept.append(f"the deployment's namespaces in EKS cluster {bp.aws.eks.cluster}: not reached ({why_not}); "
                           f"delete them with: kubectl delete namespace -l pdlift.io/deployment={bp.name}")
        get_run_logger().warning(report.kept[-1])
    return report


def _successors(wiring: Wiring, bp: Blueprint, run_id: str) -> list[str]:
    """The runs whose fleets replaced (or were to replace) ``run_id``'s: a teardown of a run
    releases them too. A ledger that cannot be read ends the chain there (tags still find the
    rest: ``pdlift teardown BLUEPRINT`` without a run id releases the whole deployment)."""

    def handover_of(rid: str):
        try:
            ledger = wiring.ledgers.load(bp.name, rid)
        except ConfigError:
            return None
        return ledger.handover() if ledger else None

    found = fleet_swap.successors(run_id, handover_of)
    if found:
        get_run_logger().info(f"{bp.name}: run {run_id}'s fleet was replaced by run(s) {', '.join(found)}: "
                              "releasing them too")
    return found


@task(cache_policy=NO_CACHE)
def mark_released(bp: Blueprint, report: stage.TeardownReport) -> list[str]:
    """End what was released in each run's ledger (it stops billing there); the run ids whose
    ledger could be read. One that cannot is named in the log and left as it is."""
    touched, now, store = [], dt.datetime.now(dt.timezone.utc), Wiring(bp).ledgers
    for run_id in sorted({f.run_id for f in report.released if f.run_id}):
        ended = [f for f in report.released if f.run_id == run_id]

        def mark(ledger):  # applied to what the store holds, again if a live run wrote meanwhile
            for f in ended:
                ledger = ledger.ended(f.kind, f.resource_id, now)
            return ledger

        try:
            if store.load(bp.name, run_id) is None:
                continue
            store.update(bp.name, run_id, mark)
        except ConfigError as e:
            get_run_logger().warning(f"released, but not marked in the run's ledger: {e}")
            continue
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
