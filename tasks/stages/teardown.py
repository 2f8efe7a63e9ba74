"""Teardown and the leak sweep: find everything by tag, release it, report what it cost.

Idempotent: a second teardown finds nothing and does nothing. Capacity Blocks cannot be
cancelled; teardown reports when they end instead.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass, field

from blueprints.schema import Blueprint
from tasks.errors import NotReadyYet, StageFailed
from tasks.planning import fleet_swap, identity, leftovers
from tasks.planning.manifests import common
from tasks.planning.timeline import approval_wait_s
from tasks.planning.identity import TAG_CREATED, TAG_DEPLOYMENT, TAG_RUN, TAG_TTL
from tasks.stages.clock import Clock, poll_until
from tasks.stages import deploy as deploy_stage
from tasks.stages.benchmark import bench_key
from tasks.stages.ports import Capacity, Instances, KubeNodes, KubeObjects
from tasks.stages.reserve import LIVE_STATES


@dataclass(frozen=True)
class Found:
    kind: str
    resource_id: str
    deployment: str
    run_id: str
    created_at: str
    ttl_hours: int
    detail: str = ""


@dataclass
class TeardownReport:
    released: list[Found] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)     # what cannot be released (Capacity Blocks), and why

    def lines(self) -> list[str]:
        out = [f"released {f.kind} {f.resource_id}" + (f" (run {f.run_id})" if f.run_id else "") for f in self.released]
        return out + [f"kept {k}" for k in self.kept]


def inventory(cap: Capacity, inst: Instances, deployment: str | None, run_id: str | None) -> list[Found]:
    """Every pdlift-tagged resource of a deployment (or of all deployments when None)."""
    filters = (identity.run_filters(deployment, run_id) if deployment
               else [{"Name": "tag-key", "Values": [TAG_DEPLOYMENT]}])
    out: list[Found] = []
    live_instances = filters + [{"Name": "instance-state-name",
                                 "Values": ["pending", "running", "stopping", "stopped", "shutting-down"]}]
    for i in inst.describe(filters=live_instances):
        out.append(_found("instance", i.instance_id, i.tags, i.state))
    for r in cap.reservations(filters=filters):
        if r.state in LIVE_STATES:
            kind = "capacity-block" if r.reservation_type == "capacity-block" else "capacity-reservation"
            out.append(_found(kind, r.reservation_id, r.tags, f"{r.state}, ends {r.end_date}"))
    for g in cap.placement_groups(filters):
        out.append(_found("placement-group", g["GroupName"], identity.tag_dict(g.get("Tags")), g.get("State", "")))
    for t in inst.launch_templates(filters):
        out.append(_found("launch-template", t["LaunchTemplateId"], identity.tag_dict(t.get("Tags")),
                          t.get("LaunchTemplateName", "")))
    return out


def _found(kind: str, rid: str, tags: dict[str, str], detail: str) -> Found:
    try:
        ttl = int(tags.get(TAG_TTL, "0"))
    except ValueError:
        ttl = 0
    return Found(kind, rid, tags.get(TAG_DEPLOYMENT, ""), tags.get(TAG_RUN, ""), tags.get(TAG_CREATED, ""), ttl, detail)


def release(found: list[Found], cap: Capacity, inst: Instances, clock: Clock = Clock(),
            kube: KubeNodes | None = None, deployments: set[str] | None = None) -> TeardownReport:
    """Release in dependency order: namespaces, instances (and wait), placement groups, reservations,
    launch templates."""
    report = TeardownReport()
    if kube is not None:
        for dep in sorted(deployments or {f.deployment for f in found}):
            for ns in kube.namespaces(f"pdlift.io/deployment={dep}"):
                kube.delete_namespace(ns)
                report.released.append(Found("namespace", ns, dep, "", "", 0))
    instances = [f for f in found if f.kind == "instance"]
    inst.terminate([f.resource_id for f in instances])
    _wait_terminated(inst, [f.resource_id for f in instances], clock)
    report.released += instances
    for f in found:
        if f.kind == "placement-group":
            _delete_placement_group(cap, f.resource_id, clock)
            report.released.append(f)
        elif f.kind == "capacity-reservation":
            cap.cancel_reservation(f.resource_id)
            report.released.append(f)
        elif f.kind == "capacity-block":
            report.kept.append(f"capacity block {f.resource_id} ({f.detail}): cannot be cancelled; "
                               "it stops billing when it ends")
    for f in found:
        if f.kind == "launch-template":
            inst.delete_launch_template(f.resource_id)
            report.released.append(f)
    return report


def _wait_terminated(inst: Instances, ids: list[str], clock: Clock, bound_s: float = 900) -> None:
    if not ids:
        return
    left: list[str] = list(ids)

    def all_terminated() -> bool:
        left[:] = [i.instance_id for i in inst.describe(ids=ids) if i.state != "terminated"]
        return not left

    try:
        poll_until(all_terminated, bound_s=bound_s, clock=clock)
    except NotReadyYet:
        raise StageFailed(f"instances {', '.join(left)} still not terminated after {bound_s:.0f}s; "
                          "run teardown again, or terminate them in the console to stop charges") from None


def _delete_placement_group(cap: Capacity, name: str, clock: Clock, bound_s: float = 300) -> None:
    try:  # InUse until the instances are gone
        poll_until(lambda: cap.delete_placement_group(name), bound_s=bound_s, clock=clock, interval_s=3.0)
    except NotReadyYet:
        raise StageFailed(f"placement group {name} still in use after {bound_s:.0f}s; run teardown again") from None


def stale(found: list[Found], now: dt.datetime, active_runs: set[str]) -> list[Found]:
    """What the sweep should release: past its TTL, or belonging to no active run. A run a fleet
    update replaced stays active through the fleets that replaced it (``<run>-f1``, ...), since
    production runs on the newest of them."""
    out = []
    for f in found:
        created = _parse(f.created_at)
        expired = created is not None and f.ttl_hours > 0 and now - created > dt.timedelta(hours=f.ttl_hours)
        if expired or not any(fleet_swap.descends_from(f.run_id, active) for active in active_runs):
            out.append(f)
    return out


def _parse(text: str) -> dt.datetime | None:
    try:
        return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc)
    except ValueError:
        return None


def leftover_candidates(bp: Blueprint, kube: KubeObjects, store, ledgers, leases,
                        flow_run_ended: Callable[[str], bool | None], now: dt.datetime,
                        active_runs: set[str] = frozenset()) -> list[leftovers.Candidate]:
    """Every colour of the deployment that production does not route to, each judged a leftover
    or kept, with why (``tasks.planning.leftovers``). A ledger or lease that cannot be read
    raises: nothing is deleted on a guess."""
    present = {}
    for colour in common.COLOURS:
        ns = kube.get("v1", "Namespace", common.colour_namespace(bp, colour))
        if ns and not ns["metadata"].get("deletionTimestamp"):  # one being deleted is on its way
            kept = (ns["metadata"].get("annotations") or {}).get(common.KEPT_ANNOTATION)
            present[colour] = leftovers.ColourSeen(ns["metadata"]["name"], leftovers.parse_time(kept))
    if not present:
        return []
    service = kube.get("v1", "Service", bp.name, common.stable_namespace(bp))
    runs = [_run_seen(bp, store, ledgers, leases, run_id, flow_run_ended, now, active_runs)
            for run_id in _oldest_first(bp, ledgers)]
    return leftovers.judge_candidates(bp.name, service is not None, deploy_stage.live_colour(bp, kube), present,
                                      runs, now, approval_wait_s(bp))


def _oldest_first(bp: Blueprint, ledgers) -> list[str]:
    found = [ledger for ledger in (ledgers.load(bp.name, rid) for rid in ledgers.runs(bp.name)) if ledger]
    return [ledger.run_id for ledger in sorted(found, key=lambda ledger: ledger.created_at)]


def _run_seen(bp: Blueprint, store, ledgers, leases, run_id: str, flow_run_ended, now: dt.datetime,
              active_runs: set[str]) -> leftovers.RunSeen:
    ledger = ledgers.load(bp.name, run_id)
    lease, _ = leases.current(bp.name, run_id)
    deployed, gate, handover = ledger.deployed(), ledger.gate(), ledger.handover()
    report = store.get(f"{bench_key(bp.name, run_id)}/gate.json")
    try:
        verdict = json.loads(report.data) if report else {}
    except ValueError:
        verdict = {"outcome": "unreadable"}
    return leftovers.RunSeen(
        run_id, lease.flow_run_id if lease else "", flow_run_ended(lease.flow_run_id) if lease else True,
        lease.expired(now) if lease else True, lease.expires_at if lease else "",
        deployed.colour if deployed else None, str(verdict.get("outcome") or ""),
        leftovers.parse_time(verdict.get("judged_at")), verdict.get("colour"),
        gate.promotion.colour if gate is not None and gate.promotion else None,
        handover is not None and handover.phase not in ("released", "abandoned"), run_id in active_runs)
