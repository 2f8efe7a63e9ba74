"""Thin Prefect task for stage 2: launch the gang, join EKS, label by topology (``tasks.stages.launch``).

Progress artifacts: the gang's instances running (``<deployment>-launch-running``), joined to the
cluster (``-launch-joined``), and both as one (``-launch-total``).
"""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.errors import StageFailed
from tasks.planning import ledger as ledger_plan
from tasks.planning.records import Fleet
from tasks.progress import StageProgress
from tasks.runs import Run
from tasks.stages import launch as stage
from tasks.wiring import Wiring

UNITS = {"running": "instances running", "joined": "instances joined to the cluster",
         "total": "steps done (each instance running, then joined)"}


@task(cache_policy=NO_CACHE)
def launch(run: Run) -> Fleet:
    run.reload()  # the reservation, and the token generations a crashed attempt recorded
    reserved = run.ledger.reserved()
    if reserved is None:
        raise StageFailed(f"run {run.run_id} has no reservation yet: run `pdlift reserve` first")
    progress = StageProgress(run.blueprint.name, "launch", UNITS)
    try:
        with Wiring(run.blueprint) as wiring:
            return stage.launch(run.blueprint, run.identity, reserved, wiring.capacity, wiring.instances,
                                wiring.cluster, wiring.kube_nodes, run.record, ended=run.ended_instance,
                                generations=ledger_plan.generations(run.ledger), on_progress=progress)
    finally:
        progress.flush()
