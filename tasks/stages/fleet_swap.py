"""The steps of a ``fleet`` update that are not the pipeline's own stages: release a fleet by its
run's tags, and give up a second fleet that could not be had or did not pass. Adapters and the
clock are injected; ``flows.update`` sequences them (``tasks.planning.fleet_swap`` keeps the books).

    release   the first fleet, after production moved to the second: every resource tagged with
              its run (instances, then placement group, reservation, launch template), found by
              tag as teardown finds them, so nothing the ledger missed keeps billing. Its
              colour was already retired by the promotion (after the keep window and the drain).
    abandon   the second fleet, when it cannot be had or its candidate did not pass: the
              candidate colour (when it is up and production does not route to it), then
              everything tagged with the second fleet's run. The live colour is not touched.
"""

from __future__ import annotations

from blueprints.schema import Blueprint
from tasks.stages import deploy as deploy_stage
from tasks.stages import teardown
from tasks.stages.clock import Clock
from tasks.stages.ports import Capacity, Instances, KubeObjects


def release(bp: Blueprint, cap: Capacity, inst: Instances, run_id: str, clock: Clock = Clock()) -> teardown.TeardownReport:
    """Everything tagged with ``run_id`` of this deployment, released in dependency order. Its
    Kubernetes namespaces are not touched: they belong to the deployment, not to one fleet."""
    found = teardown.inventory(cap, inst, bp.name, run_id)
    return teardown.release(found, cap, inst, clock)


def abandon(bp: Blueprint, kube: KubeObjects, cap: Capacity, inst: Instances, run_id: str, candidate: str,
            clock: Clock = Clock()) -> teardown.TeardownReport:
    """The candidate (unless production routes to it) and the second fleet ``run_id``, released."""
    deleted: list[str] = []
    if deploy_stage.live_colour(bp, kube) != candidate:  # a rollback of what is gone is a no-op
        deleted = list(deploy_stage.rollback(bp, kube, candidate, wait_s=300.0, clock=clock).deleted)
    report = release(bp, cap, inst, run_id, clock)
    report.released[:0] = [teardown.Found("kubernetes", name, bp.name, run_id, "", 0) for name in deleted]
    return report
