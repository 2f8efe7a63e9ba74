"""Thin Prefect tasks for teardown and the leak sweep (``tasks.stages.teardown``)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.events import emit_event

from blueprints.loader import load_blueprint
from blueprints.schema import Blueprint
from tasks.adapters.prefect_runs import flow_run_ended
from tasks.errors import ConfigError
from tasks.planning import fleet_swap, notifications
from tasks.stages import deploy as deploy_stage
from tasks.stages import teardown as stage
from tasks.stages.clock import Clock
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


# The release's waits (instances terminated, placement groups free): a test hands a faster one.
CLOCK = Clock()


@task(cache_policy=NO_CACHE)
def sweep(region: str, apply: bool, active_runs: list[str]) -> dict:
    """List pdlift-tagged resources past their TTL or of no active run; release them with apply.
    Whenever it finds any, it emits ``pdlift.sweep.leaks`` with what became of each, also when
    the release fails (and then raises): a leak that is still billing is the one to hear about."""
    wiring = RegionWiring(region)
    found = stage.inventory(wiring.capacity, wiring.instances, None, None)
    stale = stage.stale(found, dt.datetime.now(dt.timezone.utc), set(active_runs))
    report, error = None, None
    try:
        if apply and stale:
            report = stage.release(stale, wiring.capacity, wiring.instances, clock=CLOCK)
    except BaseException as e:
        error = e
        raise
    finally:
        if stale:  # for automations (deploy/automations.yaml): a leak bills until someone acts
            try:
                _emit_leaks(wiring, region, apply, active_runs, stale, report, error)
            except Exception as e:
                if error is None:
                    raise
                get_run_logger().warning(f"the leak sweep's event was not emitted ({_redacted(e)})")
    released = {f.resource_id for f in report.released} if report else set()
    return {"found": [dataclasses.asdict(f) for f in found],
            "stale": [{**dataclasses.asdict(f), "action": _action(f, apply, released)} for f in stale],
            "released": report.lines() if report else [], "kept": list(report.kept) if report else []}


def _action(found: stage.Found, apply: bool, released: set[str]) -> str:
    if not apply:
        return "would release"
    if found.resource_id in released:
        return "released"
    return "kept: a Capacity Block cannot be cancelled" if found.kind == "capacity-block" else "not released"


def _emit_leaks(wiring: RegionWiring, region: str, apply: bool, active_runs: list[str], stale: list[stage.Found],
                report: stage.TeardownReport | None, error: BaseException | None) -> None:
    fates, kept = _fates(wiring, stale, report) if apply else ({}, [])
    why = _redacted(error) if error else ""
    emit_event(**notifications.sweep_leaks_event(region, apply, active_runs, [dataclasses.asdict(f) for f in stale],
                                                 fates, kept, why))


def _fates(wiring: RegionWiring, stale: list[stage.Found],
           report: stage.TeardownReport | None) -> tuple[dict[str, str], list[str]]:
    """What became of each stale resource (``released`` / ``kept`` / ``failed``) and why each kept
    one was kept. Without a report (the release raised part way) the tags say what is gone: one
    still found, or all when they cannot be read, is ``failed``."""
    if report is not None:
        released = {f.resource_id for f in report.released}
        return ({f.resource_id: "released" if f.resource_id in released else
                 "kept" if f.kind == "capacity-block" else "failed" for f in stale}, list(report.kept))
    try:
        left = {f.resource_id for f in stage.inventory(wiring.capacity, wiring.instances, None, None)}
    except Exception as e:
        get_run_logger().warning(f"after the failed release, what is left could not be listed ({_redacted(e)}): "
                                 "each leak is reported as not released")
        left = None
    fates, kept = {}, []
    for f in stale:
        if f.kind == "capacity-block":
            fates[f.resource_id] = "kept"
            kept.append(f"capacity block {f.resource_id} ({f.detail}): cannot be cancelled; "
                        "it stops billing when it ends")
        else:
            fates[f.resource_id] = "released" if left is not None and f.resource_id not in left else "failed"
    return fates, kept


def _redacted(error: BaseException) -> str:
    return notifications.error_line(error, notifications.secret_values(os.environ))


@task(cache_policy=NO_CACHE)
def sweep_candidates(blueprint_path: str, apply: bool, active_runs: list[str]) -> list[dict]:
    """Each colour of the blueprint's deployment that production does not route to: a leftover
    (listed; deleted with ``apply``) or kept, with why (``tasks.planning.leftovers``). The case it
    exists for: a suspended ``benchmark-gate`` run whose approval timed out is failed by Prefect
    without running any of its code, so its candidate stays up until someone deletes it. A
    blueprint that cannot be checked is a row saying why; it stops no other check."""
    log = get_run_logger()
    try:
        bp = load_blueprint(blueprint_path, to_release=True)
        with Wiring(bp) as wiring:
            def judged():
                # Prefect as configured, never a temporary server: it would know no run and say nothing.
                return stage.leftover_candidates(bp, wiring.kube, wiring.state, wiring.ledgers, wiring.leases(),
                                                 lambda fr: flow_run_ended(fr, temporary_server=False),
                                                 dt.datetime.now(dt.timezone.utc), set(active_runs))
            rows = [_candidate_row(bp, wiring, c, apply, judged, log) for c in judged()]
    except Exception as e:  # noqa: BLE001 (the sweep goes on with the next blueprint and the report)
        why = _redacted(e)
        log.error(f"{blueprint_path}: candidates not checked: {why}")
        return [_row("candidate-namespace", "-", blueprint_path, f"not checked: {why}", why)]
    return rows


def _candidate_row(bp: Blueprint, wiring: Wiring, candidate, apply: bool, judged, log) -> dict:
    action, why = "kept", candidate.why
    if candidate.leftover:
        action = "would delete"
        # Judged again right before deleting: a run that started meanwhile may own it now.
        still = [c for c in judged() if c.colour == candidate.colour and c.leftover] if apply else [candidate]
        if apply and not still:
            action, why = "kept", "a run took it up while the sweep ran"
        elif apply:
            done = deploy_stage.rollback(bp, wiring.kube, candidate.colour, wait_s=0)
            action = "deleted: " + (", ".join(done.deleted) or "already going")
    log.warning(f"{bp.name}: candidate {candidate.colour} ({candidate.namespace}): {action}: {why}"
                + (" (dry run: apply to delete)" if action == "would delete" else ""))
    return _row("candidate-namespace", candidate.namespace, bp.name, action, why)


def _row(kind: str, resource_id: str, deployment: str, action: str, why: str) -> dict:
    return {"kind": kind, "resource_id": resource_id, "deployment": deployment, "run_id": "", "created_at": "",
            "ttl_hours": "", "action": action, "why": why}
