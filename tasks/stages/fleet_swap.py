"""The steps of a ``fleet`` update that are not the pipeline's own stages: make sure the update
replaces the fleet production runs on, release a fleet by its run's tags, and give up a second
fleet that could not be had or did not pass. Adapters and the clock are injected;
``flows.update`` sequences them (``tasks.planning.fleet_swap`` keeps the books).

    check_owner  before anything is bought: the live colour's engines run on nodes of this run's
                 fleet (``pdlift.io/run``), or the release after the switch would find nothing
                 of it and leave the fleet production used to run on billing
    release      a fleet, by every resource tagged with its run (instances, then placement group,
                 reservation, launch template), found as teardown finds them; refused while any
                 pod of the colour production routes to runs on that fleet's nodes
    abandon      the second fleet: its candidate deleted (best effort: the cluster may be what
                 failed), then the fleet released as above; the live colour is not touched
"""

from __future__ import annotations

from blueprints.schema import Blueprint
from tasks.errors import PdliftError, StageFailed
from tasks.planning.manifests.common import COLOUR_LABEL, DEPLOYMENT_LABEL, RUN_LABEL, colour_namespace, stable_namespace
from tasks.planning.manifests.router import selector as router_selector
from tasks.stages import deploy as deploy_stage
from tasks.stages import teardown
from tasks.stages.clock import Clock
from tasks.stages.ports import Capacity, Instances, KubeObjects


def _fleet_nodes(bp: Blueprint, kube: KubeObjects, run_id: str) -> set[str]:
    nodes, _ = kube.fleet_gpus({DEPLOYMENT_LABEL: bp.name, RUN_LABEL: run_id})
    return {n.name for n in nodes}


def _colour_pods(bp: Blueprint, kube: KubeObjects, colour: str):
    return (kube.pods(colour_namespace(bp, colour), {COLOUR_LABEL: colour})
            + kube.pods(stable_namespace(bp), router_selector(bp, colour)))


def check_owner(bp: Blueprint, kube: KubeObjects, live: str, run_id: str) -> None:
    """Refuse (nothing touched) unless every engine pod of ``live`` runs on run ``run_id``'s nodes."""
    mine = _fleet_nodes(bp, kube, run_id)
    engines = kube.pods(colour_namespace(bp, live), {COLOUR_LABEL: live})
    elsewhere = sorted(f"{p.name} on {p.node or 'no node'}" for p in engines if p.node not in mine)
    if not engines or elsewhere:
        what = ", ".join(elsewhere[:4]) if engines else "no engine pods found"
        raise StageFailed(f"{bp.name}: fleet replaces the fleet of run {run_id}, but the live {live} does not run "
                          f"on it ({what}; its nodes carry {RUN_LABEL}=<the run that launched them>): run the "
                          "update with that run id (--run-id, or fleet_run_id). Nothing was touched")


def production_pods_on(bp: Blueprint, kube: KubeObjects, run_id: str) -> list[str]:
    """Pods of the colour production routes to that run on ``run_id``'s nodes."""
    live = deploy_stage.live_colour(bp, kube)
    if live is None:
        return []
    nodes = _fleet_nodes(bp, kube, run_id)
    return sorted(f"{p.name} on {p.node}" for p in _colour_pods(bp, kube, live) if p.node in nodes)


def release(bp: Blueprint, cap: Capacity, inst: Instances, kube: KubeObjects, run_id: str,
            clock: Clock = Clock()) -> teardown.TeardownReport:
    """Everything tagged with ``run_id`` of this deployment, released in dependency order, unless
    production still has pods on its nodes. Kubernetes namespaces are not touched: they belong to
    the deployment, not to one fleet."""
    serving = production_pods_on(bp, kube, run_id)
    if serving:
        raise StageFailed(f"{bp.name}: refusing to release run {run_id}'s fleet: production's pods run on it "
                          f"({', '.join(serving[:4])}). Nothing was released")
    return teardown.release(teardown.inventory(cap, inst, bp.name, run_id), cap, inst, clock)


def abandon(bp: Blueprint, kube: KubeObjects, cap: Capacity, inst: Instances, run_id: str, candidate: str,
            clock: Clock = Clock()) -> teardown.TeardownReport:
    """The candidate (unless production routes to it) and the second fleet ``run_id``, released.
    A cluster that cannot delete the candidate does not keep the fleet billing: the candidate's
    namespace goes with its nodes, and the report says what is left to delete."""
    deleted: list[str] = []
    left = ""
    try:
        if deploy_stage.live_colour(bp, kube) != candidate:  # a rollback of what is gone is a no-op
            deleted = list(deploy_stage.rollback(bp, kube, candidate, wait_s=0).deleted)
    except PdliftError as e:
        left = (f"the candidate {candidate} could not be deleted ({e}); delete it with: pdlift rollback "
                f"BLUEPRINT {candidate}")
    report = release(bp, cap, inst, kube, run_id, clock)
    report.released[:0] = [teardown.Found("kubernetes", name, bp.name, run_id, "", 0) for name in deleted]
    if left:
        report.kept.append(left)
    return report
