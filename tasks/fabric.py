"""Thin Prefect task for stage 3: validate the EFA fabric of the run's fleet, replace bad nodes.

The procedure is ``tasks.stages.fabric`` (layers, replacement through the node lifecycle). The
report is a markdown artifact; the raw results go to the run's folder in the state store. Progress
artifacts count units per layer (``<deployment>-fabric-<layer>``) and in total (``-fabric-total``).
"""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from tasks.errors import PdliftError, StageFailed
from tasks.planning.identity import artifact_key
from tasks.planning.records import FabricVerdict
from tasks.progress import StageProgress
from tasks.runs import Run
from tasks.stages import fabric as stage
from tasks.stages.fabric_results import results_key
from tasks.stages.nodes import NodeLifecycle
from tasks.wiring import Wiring

UNITS = {"inventory": "nodes inventoried", "loopback": "nodes' loopbacks run",
         "single-node": "single-node tests run", "pairwise": "pair rounds run", "full-set": "whole-set nccl tests run",
         "total": "units done (a node per layer, a pair round, an nccl test)"}


@task(cache_policy=NO_CACHE)  # a probe of live hardware: never replay a cached verdict
def validate(run: Run) -> FabricVerdict:
    """Validate every node's GPUs, EFA devices and links. A failed verdict is returned, not raised:
    the fleet it ends with (replacements included) must reach the ledger first."""
    bp, fleet, reserved = run.blueprint, run.ledger.fleet(), run.ledger.reserved()
    if fleet is None or not fleet.nodes or reserved is None:
        raise StageFailed(f"run {run.run_id} has no launched fleet: run `pdlift launch {bp.name}` first")
    progress = StageProgress(bp.name, "fabric", UNITS)
    with Wiring(bp) as wiring:
        nodes = NodeLifecycle(bp, run.identity, reserved, wiring.instances, wiring.kube_nodes, run.record,
                              run.ended_instance)
        try:
            done = stage.validate_fleet(bp, run.run_id, fleet, nodes, wiring.shell, wiring.state_root,
                                        get_run_logger().info, progress)
        except BaseException:  # the raw results of a failed validation are what an operator reads first
            _keep_results(wiring, bp.name, run.run_id)
            progress.flush()
            raise
        wiring.state.push(results_key(bp.name, run.run_id))
    create_markdown_artifact(markdown=done.markdown, key=artifact_key("fabric-report", bp.name),
                             description=f"fabric validation of run {run.run_id}")
    return done.verdict


def _keep_results(wiring: Wiring, deployment: str, run_id: str) -> None:
    """Push what a failing validation wrote, never hiding its own error behind the store's."""
    try:
        wiring.state.push(results_key(deployment, run_id))
    except PdliftError as e:
        get_run_logger().warning(f"fabric results not kept in the state store {wiring.state.uri}: {e}")
