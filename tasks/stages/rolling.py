"""The steps of a ``rolling`` update: the live colour's roles replaced one at a time, in place, on
the nodes they hold. Adapters and the clock are injected; ``flows.update`` sequences them.

    roll     apply one role's LeaderWorkerSet as the candidate renders it (the LWS controller
             replaces its group: maxSurge 0, one group per role here), then wait until every pod
             of the role carries the candidate's revision and is Ready, and the router lists it
             healthy again
    restart  delete a role's leader pods: LWS recreates each group on the same template
             (RecreateGroupOnPodRestart), so its engines start afresh
    canary   the P->D path through the colour's router, as a deploy's canary judges it

A revert is a roll to the snapshot's LeaderWorkerSet of the same role. A roll that finds the role
already on the revision it asks for applies nothing new and returns once the role is Ready, so a
re-run of a cut-off rolling update goes on where it stopped.
Sources: ``../shared/reference/fleet-updates.md`` (B. rolling-by-role), LWS
``pkg/controllers/leaderworkerset_controller.go`` (rolling update of the leader StatefulSet).
"""

from __future__ import annotations

from blueprints.schema import Blueprint
from tasks.errors import NotReadyYet, StackFailure, StageFailed
from tasks.planning import rolling as plan
from tasks.planning.manifests import common
from tasks.planning.manifests.common import colour_namespace
from tasks.planning.records import RoleRolled
from tasks.stages import deploy as deploy_stage
from tasks.stages.clock import Clock, poll_until
from tasks.stages.deploy_wait import PodGroup, WaitLimits, wait_for_stack
from tasks.stages.ports import Engines, FabricCounters, KubeObjects, Progress


def live_revisions(bp: Blueprint, kube: KubeObjects, colour: str) -> dict[str, str]:
    """Role -> the revision label its LeaderWorkerSet carries in ``colour`` ('' when absent)."""
    ns = colour_namespace(bp, colour)
    return {role: (((kube.get(plan.LWS_API, "LeaderWorkerSet", role, ns) or {}).get("metadata") or {})
                   .get("labels") or {}).get(common.REVISION_LABEL, "") for role in plan.ROLES}


def _groups(bp: Blueprint, colour: str, objects: list[dict], role: str, revision: str) -> list[PodGroup]:
    """The role's pods on ``revision`` (the other role is not waited for), and the colour's router."""
    out = []
    for group in deploy_stage.pod_groups(bp, colour, objects):
        if group.what == role:
            out.append(PodGroup(role, group.namespace, {**group.selector, common.REVISION_LABEL: revision},
                                group.count))
        elif group.what == common.ROUTER:
            out.append(group)
    return out


def roll(bp: Blueprint, kube: KubeObjects, http: Engines, colour: str, objects: list[dict], role: str,
         limits: WaitLimits, clock: Clock, progress: Progress = lambda _: None) -> RoleRolled:
    """``role`` of the live ``colour`` onto ``objects``' LeaderWorkerSet (the candidate's, or a
    snapshot's for a revert). Raises ``StackFailure`` (with the pods' diagnostics) when the new
    engines do not come up."""
    lws = plan.role_object(objects, role)
    revision = plan.revision_of(lws)
    if lws["metadata"].get("namespace") != colour_namespace(bp, colour):
        raise StageFailed(f"{bp.name}: the {role} LeaderWorkerSet to roll is rendered for "
                          f"{lws['metadata'].get('namespace')}, not the live {colour_namespace(bp, colour)}")
    before = live_revisions(bp, kube, colour)[role]
    started = clock.monotonic()
    applied = kube.apply(lws)
    progress(f"{role}: applied {applied.ref} (revision {before or 'none'} -> {revision})")
    phases = wait_for_stack(kube, _groups(bp, colour, objects, role, revision),
                            lambda pods: deploy_stage.router_gaps(http, bp, objects, pods), limits, clock, progress)
    return RoleRolled(role, before, revision, round(clock.monotonic() - started, 3), phases)


def restart(bp: Blueprint, kube: KubeObjects, http: Engines, colour: str, objects: list[dict], role: str,
            limits: WaitLimits, clock: Clock, progress: Progress = lambda _: None) -> RoleRolled:
    """Delete ``role``'s leader pods in ``colour``, wait until every pod the role had is gone (its
    workers go with their leader), then until the groups LWS recreates are Ready and listed
    healthy by the router (``objects``: what runs, for the revision and the counts)."""
    ns, revision = colour_namespace(bp, colour), plan.revision_of(plan.role_object(objects, role))
    selector = {common.COLOUR_LABEL: colour, common.LWS_NAME_LABEL: role}
    old = kube.pods(ns, selector)
    started = clock.monotonic()
    for pod in old:
        if pod.labels.get(common.LWS_WORKER_INDEX_LABEL) == "0" and not pod.deleting:
            kube.delete("v1", "Pod", pod.name, ns)
    progress(f"{role}: restarting its group(s): deleted the leader(s) of {', '.join(p.name for p in old) or 'none'}")
    uids = {p.uid for p in old}
    bound = limits.scheduled_s + common.SHUTDOWN_TIMEOUT_S

    def gone():
        return not any(p.uid in uids for p in kube.pods(ns, selector)) or None

    try:
        poll_until(gone, bound_s=bound, clock=clock, interval_s=0.5, max_interval_s=limits.poll_s)
    except NotReadyYet:
        raise StackFailure(f"{bp.name} {colour}: the {role} pods deleted for a restart are still there after "
                           f"{bound:g} s; see kubectl -n {ns} get pods -l {common.LWS_NAME_LABEL}={role}",
                           "RestartStuck") from None
    phases = wait_for_stack(kube, _groups(bp, colour, objects, role, revision),
                            lambda pods: deploy_stage.router_gaps(http, bp, objects, pods), limits, clock, progress)
    return RoleRolled(role, revision, revision, round(clock.monotonic() - started, 3), phases)


def finish(bp: Blueprint, kube: KubeObjects, http: Engines, colour: str, objects: list[dict], limits: WaitLimits,
           clock: Clock, progress: Progress = lambda _: None) -> dict[str, float]:
    """The rest of the rolled stack (its router, Services, accounts: a no-op where unchanged)
    applied, then the whole colour waited for; seconds per wait phase."""
    deploy_stage.apply_objects(kube, objects, progress)
    return wait_for_stack(kube, deploy_stage.pod_groups(bp, colour, objects),
                          lambda pods: deploy_stage.router_gaps(http, bp, objects, pods), limits, clock, progress)


def canary(bp: Blueprint, kube: KubeObjects, http: Engines, colour: str, options: deploy_stage.DeployOptions,
           fabric: FabricCounters | None, step: str) -> str:
    """The P->D path through ``colour``'s router after ``step``; raises ``StackFailure`` naming
    the step when it does not pass. Returns the canary's summary."""
    report = deploy_stage.run_canary(bp, kube, http, colour, options, fabric)
    if not report.ok:
        raise StackFailure(f"{bp.name} {colour}: the canary after {step} failed: " + "; ".join(report.problems),
                           "Canary", report.summary())
    return report.summary()
