"""Read what `pdlift status` shows: the store's runs, leases and gate reports, EC2's word on the
reservations, and the engines production's Service selects. Reads only; a system that does not
answer is named, never fatal (the screen matters most when something is down)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable

from blueprints.schema import Blueprint
from tasks.errors import ConfigError, PdliftError
from tasks.planning import status as view
from tasks.planning.manifests import common
from tasks.stages import deploy as deploy_stage
from tasks.stages.benchmark import bench_key
from tasks.stages.ports import Capacity, Instances, KubeObjects
from tasks.stages.teardown import inventory

# What a read of a system that is down raises: the adapters' errors, and the OS's for a refused connection.
UNANSWERED = (PdliftError, OSError)


def gather(bp: Blueprint, blueprint_path: str, store, ledgers, leases, capacity: Callable[[], Capacity],
           instances: Callable[[], Instances], kube: Callable[[], KubeObjects], now: dt.datetime,
           ui_url: str | None, flow_run_ended: Callable[[str], bool | None] = lambda _id: None) -> view.Status:
    """``capacity``, ``instances`` and ``kube`` build their adapter on first use: Kubernetes is
    asked only once a run has deployed (before that there may be no cluster to ask)."""
    unreachable: list[str] = []
    runs = _ledgers(bp, ledgers, unreachable)
    held = []
    for ledger in runs:
        try:
            lease, _ = leases.current(bp.name, ledger.run_id)
        except ConfigError as e:  # one unreadable lease does not hide the rest
            unreachable.append(f"lease of run {ledger.run_id}: {e}")
            continue
        # A lease outlives a flow run that ended without giving it up (the next run takes it over
        # at once, asking Prefect): that run is not in flight, whatever the expiry says.
        if lease is not None and flow_run_ended(lease.flow_run_id) is not True:
            held.append(lease)
    reservations = _reservations(runs, capacity, unreachable)
    tagged = _tagged(bp, capacity, instances, unreachable)
    asked_kube = any(ledger.deployed() for ledger in runs)
    engines = _engines(bp, kube, unreachable) if asked_kube else None
    gates = [g for g in (_gate(store, bp.name, ledger.run_id) for ledger in runs) if g]
    return view.compose(bp.name, blueprint_path, store.uri, now, runs, held, reservations, engines, gates, ui_url,
                        tagged, tuple(unreachable), kube_answered=not asked_kube or engines is not None)


def _ledgers(bp: Blueprint, ledgers, unreachable: list[str]) -> list:
    """Every readable ledger of the deployment, oldest first; one that cannot be read is named and
    skipped (EC2's tagged inventory still shows what it holds)."""
    runs = []
    for rid in ledgers.runs(bp.name):
        try:
            ledger = ledgers.load(bp.name, rid)
        except ConfigError as e:
            unreachable.append(f"ledger of run {rid}: {e}")
            continue
        if ledger is not None:
            runs.append(ledger)
    return sorted(runs, key=lambda ledger: ledger.created_at)


def _tagged(bp: Blueprint, capacity, instances, unreachable: list[str]) -> list[view.Tagged] | None:
    """What `pdlift teardown` would find: it releases by tag, whatever the ledgers say."""
    try:
        found = inventory(capacity(), instances(), bp.name, None)
    except UNANSWERED as e:
        unreachable.append(f"EC2 (the deployment's tagged resources): {e}")
        return None
    return [view.Tagged(f.kind, f.resource_id, f.run_id) for f in found]


def _reservations(runs, capacity, unreachable: list[str]) -> dict[str, view.Reservation]:
    ids = [r.reservation_id for r in (ledger.reserved() for ledger in runs if ledger.live()) if r]
    if not ids:
        return {}
    try:
        found = capacity().reservations(ids=ids)
    except UNANSWERED as e:
        unreachable.append(f"EC2 (DescribeCapacityReservations): {e}")
        return {}
    return {r.reservation_id: view.Reservation(r.reservation_id, r.state,
                                               r.end_date.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
                                               if r.end_date else "") for r in found}


def _engines(bp: Blueprint, kube, unreachable: list[str]) -> view.LiveEngines | None:
    try:
        client = kube()
        live = deploy_stage.live_colour(bp, client)
        if live is None:
            return view.LiveEngines(None)
        pods = [p for p in client.pods(common.colour_namespace(bp, live),
                                       {common.DEPLOYMENT_LABEL: bp.name, common.COLOUR_LABEL: live})
                if p.labels.get(common.ROLE_LABEL) in (common.PREFILL, common.DECODE)]
    except UNANSWERED as e:
        unreachable.append(f"Kubernetes: {e}")
        return None
    engines = [c for p in pods for c in p.containers if c.name == common.ENGINE_CONTAINER]
    return view.LiveEngines(live, tuple(sorted({(c.image, c.image_id) for c in engines if c.image})),
                            sum(p.ready for p in pods), len(pods))


def _gate(store, deployment: str, run_id: str) -> view.GateSeen | None:
    key = f"{bench_key(deployment, run_id)}/gate.json"
    stored = store.get(key)
    if stored is None:
        return None
    try:
        report = json.loads(stored.data)
    except ValueError:
        return view.GateSeen(run_id, "unreadable", (f"{key} is not JSON",), key)
    return view.GateSeen(run_id, str(report.get("outcome", "?")), tuple(report.get("reasons") or ()), key,
                         str(report.get("judged_at") or ""), str(report.get("flow_run_id") or ""))
