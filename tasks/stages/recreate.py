"""The steps of a ``recreate`` update on a fleet with no room for a second colour. Adapters and
the clock are injected; ``flows.update`` sequences them.

    snapshot   the live colour's applied manifests (images by digest) and its blueprint, as the
               deploy that brought it up stored them; checked against the live pods' revision
    prepull    the candidate's images pulled onto the live colour's nodes while it still serves
               (``manifests.prepull``): an image that cannot be pulled stops the update here
    drain      production to the maintenance responder (503 + Retry-After), then wait until the
               live engines have no request running, at most the engines' --shutdown-timeout
    remove     delete the live colour (its GPUs are the candidate's) and wait until it is gone
    (deploy, benchmark and gate of the candidate: the ordinary stages, then production back on)
    restore    on a FAIL or any error: the candidate deleted, the snapshot re-applied, its canary
               passed, production back on the previous version

Production is down from the drain until production is back on (``Downtime``): the candidate's
cold start, canary and benchmark, or the previous version's cold start and canary on a restore.
Sources: ``../shared/reference/fleet-updates.md`` (A. recreate), vLLM ``--shutdown-timeout``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from blueprints.loader import parse_blueprint
from blueprints.schema import Blueprint
from tasks.errors import NotReadyYet, PdliftError, StackNotReady, StageFailed
from tasks.planning.manifests import common, maintenance, prepull as prepull_pods
from tasks.planning.manifests.common import COLOUR_LABEL, REVISION_LABEL, colour_namespace, stable_namespace
from tasks.planning.manifests.pods import LWS_API
from tasks.planning.records import RolledBack
from tasks.stages import deploy as deploy_stage
from tasks.stages import promote as promote_stage
from tasks.stages.clock import Clock, poll_until
from tasks.stages.deploy_wait import wait_for_stack
from tasks.stages.ports import Engines, FabricCounters, KubeObjects, Routing

MAINTENANCE_READY_S = 120.0
PREPULL_BOUND_S = 1800.0  # an engine image is tens of GB; a node's registry pull can take many minutes


@dataclass(frozen=True)
class Snapshot:
    colour: str
    blueprint_text: str
    objects: list[dict] = field(hash=False)
    revision: str

    @property
    def blueprint(self) -> Blueprint:
        return parse_blueprint(self.blueprint_text, f"the snapshot of {self.colour}")


def _revision_of(objects: list[dict]) -> str:
    return next((o["metadata"]["labels"].get(REVISION_LABEL, "") for o in objects if o["kind"] == "LeaderWorkerSet"), "")


def read_snapshot(bp: Blueprint, kube: KubeObjects, colour: str, directory: Path, running: bool = True,
                  resuming: str = "") -> Snapshot:
    """The stored manifests of the live ``colour``, refused unless they are what runs (``running``;
    False after a recreate was cut off, when the colour's engines may be gone already). A role
    may run ``resuming`` instead: the revision a cut-off rolling update had got it to."""
    manifests = Path(directory) / f"{bp.name}-{colour}.yaml"
    blueprint = Path(directory) / deploy_stage.snapshot_blueprint_name(bp.name, colour)
    if not manifests.exists() or not blueprint.exists():
        raise StageFailed(f"{bp.name}: no snapshot of the live colour {colour} under {directory} (the deploy that "
                          "brought it up stores one): without it a failed recreate could not put it back, so "
                          "nothing was touched. Bring the live colour up once with this version of pdlift "
                          "(`pdlift deploy`, then promote it), then redeploy")
    objects = [o for o in yaml.safe_load_all(manifests.read_text()) if o]
    stored = _revision_of(objects)
    if not stored:
        raise StageFailed(f"{bp.name}: the snapshot of {colour} under {directory} has no {REVISION_LABEL} label")
    ns = colour_namespace(bp, colour)
    revisions = {((kube.get(LWS_API, "LeaderWorkerSet", role, ns) or {}).get("metadata") or {}).get(
        "labels", {}).get(REVISION_LABEL, "") for role in (common.PREFILL, common.DECODE)}
    live = ", ".join(sorted(r or "unlabelled" for r in revisions))
    if running and not revisions <= {stored, resuming or stored}:
        raise StageFailed(f"{bp.name}: the snapshot of {colour} is revision {stored} but the live engines run "
                          f"{live}; refusing to update over a stack pdlift could "
                          "not restore. Nothing was touched")
    return Snapshot(colour, blueprint.read_text(), objects, stored)


def prepull(bp: Blueprint, kube: KubeObjects, live: str, candidate: list[dict], clock: Clock,
            bound_s: float = PREPULL_BOUND_S) -> list[str]:
    """Pull every image of the ``candidate`` objects onto the nodes the ``live`` colour's engines
    run on, production still serving. Returns the nodes. Raises ``StageFailed`` naming each node
    and image that cannot be pulled (or did not finish within ``bound_s``); nothing else is
    touched then. The pods are deleted either way."""
    ns = colour_namespace(bp, live)
    nodes = sorted({p.node for p in kube.pods(ns, {COLOUR_LABEL: live})
                    if p.node and p.labels.get(common.ROLE_LABEL) in (common.PREFILL, common.DECODE)})
    if not nodes:
        raise StageFailed(f"{bp.name}: the live colour {live} has no engine pod on a node ({ns}); nothing to "
                          "recreate over. Nothing was touched")
    wanted = prepull_pods.images(candidate)
    pods = prepull_pods.pods(bp, nodes, wanted)
    where = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}
    stable, missing = stable_namespace(bp), [nodes]
    try:
        for pod in pods:
            kube.apply(pod)

        def pulled():
            seen = {p.name: p for p in kube.pods(stable, prepull_pods.selector(bp))}
            failed: dict[tuple[str, str, str], list[str]] = {}  # (image, reason, message) -> nodes
            waiting = []
            for name, node in where.items():
                for key in _pull_failures(seen.get(name), wanted):
                    failed.setdefault(key, []).append(node)
                if not _pulled(seen.get(name)):
                    waiting.append(node)
            if failed:
                raise StageFailed(
                    f"{bp.name}: the candidate's image cannot be pulled, so the recreate stopped before production "
                    f"went down ({live} still serves): " + "; ".join(
                        f"{image}: {reason} on {', '.join(nodes)}" + (f" ({message})" if message else "")
                        for (image, reason, message), nodes in failed.items())
                    + ". Fix engine.image (a digest the nodes' registry has), then redeploy")
            missing[0] = waiting
            return not waiting or None

        try:
            poll_until(pulled, bound_s=bound_s, clock=clock, interval_s=1.0, max_interval_s=5.0)
        except NotReadyYet:
            raise StageFailed(f"{bp.name}: the candidate's images were not on {', '.join(missing[0])} within "
                              f"{bound_s:g} s; the recreate stopped before production went down ({live} still "
                              "serves)") from None
    finally:
        for name in where:
            try:
                kube.delete("v1", "Pod", name, stable)
            except PdliftError:
                pass  # a leftover pod ran `true` and holds nothing; the next prepull replaces it
    return nodes


def _pull_failures(pod, wanted: list[str]) -> list[tuple[str, str, str]]:
    """(image, kubelet reason, its message) for each container of the pod whose image will not come."""
    if pod is None:
        return []
    return [(wanted[int(c.name.rsplit("-", 1)[1])], c.waiting_reason, c.waiting_message)
            for c in pod.containers if c.waiting_reason in prepull_pods.PULL_FAILURES]


def _pulled(pod) -> bool:
    """Every container ran (its image is on the node), whatever its exit code."""
    return pod is not None and bool(pod.containers) and all(c.exit_code is not None for c in pod.containers)


@dataclass(frozen=True)
class Maintenance:
    restores_to: str        # the colour that was live
    generation_before: str  # the run's last deploy generation when the recreate began


def in_maintenance(bp: Blueprint, routing: Routing) -> Maintenance | None:
    """What to put back when production points at the maintenance responder (a recreate is in
    flight, or was cut off); None when it does not."""
    ns = stable_namespace(bp)
    selector = routing.selector(ns, bp.name) or {}
    if selector.get("app.kubernetes.io/component") != maintenance.MAINTENANCE:
        return None
    notes = routing.annotations("v1", "Service", bp.name, ns)
    colour = notes.get(maintenance.RESTORES_TO_ANNOTATION, "")
    if colour not in common.COLOURS:
        raise StageFailed(f"{bp.name}: production ({ns}/{bp.name}) is in maintenance but does not say which colour "
                          f"to restore ({maintenance.RESTORES_TO_ANNOTATION}); promote one "
                          f"by hand (kubectl -n {ns} edit service {bp.name}: its selector's pdlift.io/colour)")
    return Maintenance(colour, notes.get(maintenance.GENERATION_ANNOTATION, ""))


def open_maintenance(bp: Blueprint, routing: Routing, live: str, retry_after_s: int, clock: Clock,
                     bound_s: float = MAINTENANCE_READY_S, image: str | None = None,
                     generation_before: str = "") -> float:
    """Production answers 503 + Retry-After: the responder first, then the Service switched to it.
    Returns when (epoch seconds) every ready endpoint of production was the responder."""
    ns = stable_namespace(bp)
    routing.apply(maintenance.deployment(bp, retry_after_s, image))
    kube = routing.kube

    def responder_ready():
        return any(p.ready for p in kube.pods(ns, maintenance.selector(bp))) or None

    _bounded(responder_ready, bound_s, clock, f"the maintenance responder {ns}/{maintenance.MAINTENANCE} "
                                              "did not become ready")
    routing.apply(maintenance.production_service(bp, live, generation_before))

    def switched():
        ready = [e for e in routing.endpoints(ns, bp.name) if e.ready]
        kinds = {routing.pod_labels(ns, e.pod).get("app.kubernetes.io/component") for e in ready}
        return (ready and kinds == {maintenance.MAINTENANCE}) or None

    _bounded(switched, bound_s, clock, f"the production Service {ns}/{bp.name} did not switch to the "
                                       "maintenance responder")
    return clock.now().timestamp()


def close_maintenance(bp: Blueprint, kube: KubeObjects) -> None:
    kube.delete("apps/v1", "Deployment", maintenance.MAINTENANCE, stable_namespace(bp))


def remove(bp: Blueprint, kube: KubeObjects, colour: str, wait_s: float, clock: Clock) -> RolledBack:
    """Delete ``colour`` and wait until its namespace is gone. Only while production is in
    maintenance (the deploy stage's rollback refuses a colour production selects)."""
    return deploy_stage.rollback(bp, kube, colour, wait_s=wait_s, clock=clock)


def restore(snapshot: Snapshot, kube: KubeObjects, http: Engines, routing: Routing,
            options: deploy_stage.DeployOptions, clock: Clock, progress=lambda _: None,
            fabric: FabricCounters | None = None) -> tuple[dict[str, float], float]:
    """Re-apply the snapshot, wait for it, pass its canary, switch production back to it. (Seconds
    per phase, when production answered from it again in epoch seconds.)"""
    bp = snapshot.blueprint
    deploy_stage.wait_namespace_gone(kube, colour_namespace(bp, snapshot.colour), options.limits.scheduled_s,
                                     clock, terminating_only=True)
    started = clock.monotonic()
    deploy_stage.apply_objects(kube, snapshot.objects, progress)
    phases = wait_for_stack(kube, deploy_stage.pod_groups(bp, snapshot.colour, snapshot.objects),
                            lambda pods: deploy_stage.router_gaps(http, bp, snapshot.objects, pods),
                            options.limits, clock, progress)
    phases["restore_up"] = round(clock.monotonic() - started, 3)
    report = deploy_stage.run_canary(bp, kube, http, snapshot.colour, options, fabric)
    progress(report.summary())
    if not report.ok:
        raise StackNotReady(f"{bp.name}: the restored {snapshot.colour} failed its canary: "
                            + "; ".join(report.problems) + f". Production still answers 503 (maintenance); "
                            f"inspect with `kubectl -n {colour_namespace(bp, snapshot.colour)} get pods`")
    switched = clock.monotonic()
    back = promote_stage.promote(bp, snapshot.colour, routing, http, clock)
    phases["switch_back"] = round(clock.monotonic() - switched, 3)
    close_maintenance(bp, kube)
    return phases, back.answered_at


def _bounded(check, bound_s: float, clock: Clock, what: str) -> None:
    try:
        poll_until(check, bound_s=bound_s, clock=clock, interval_s=0.5)
    except NotReadyYet:
        raise StackNotReady(f"{what} within {bound_s:g} s") from None
