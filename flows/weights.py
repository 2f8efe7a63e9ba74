"""Stage 4 flow: stage the model weights from S3 to every node's NVMe, verified and resumable.

By default the nodes are the run's fleet (host keys pinned from each instance's console output)
and the stage is recorded in the run's ledger. Given ``nodes`` (any hosts, e.g. a fleet pdlift
did not launch), it stages there and records nothing: the run's fleet is not what was staged.
Re-running is cheap: verified files are skipped and partial ones resume by range.
"""

from __future__ import annotations

from prefect import flow

from blueprints.schema import Blueprint
from flows import pipeline
from tasks import plan as plan_tasks
from tasks import weights
from tasks.adapters.ssh import SshNode
from tasks.errors import StageFailed
from tasks.planning.records import StagedWeights


@flow(name="stage-weights", log_prints=True)
def weights_flow(blueprint_path: str, run_id: str | None = None, *, nodes: list[SshNode] | None = None,
                 write_manifest: bool = False, timeout_s: float | None = None) -> StagedWeights:
    """Args:
        blueprint_path: the blueprint (model.weights_uri, staging, aws.ssh).
        run_id: the run whose fleet to stage onto (default: derived from the blueprint).
        nodes: stage onto these instead (with their pinned host keys); nothing is recorded then.
        write_manifest: hash objects that have no checksum yet (pdlift-manifest.json) first.
        timeout_s: per-node stager timeout; default from the model size (50 MB/s + 15 min).
    """
    if nodes is not None:  # not the run's fleet: no run state is read or written
        return _stage(plan_tasks.load(blueprint_path), nodes, write_manifest, timeout_s)
    run = pipeline.start(blueprint_path, run_id)
    fleet = run.ledger.fleet()
    if fleet is None:
        raise StageFailed(f"run {run.run_id} has no launched fleet to stage onto: run `pdlift launch` first, "
                          "or name the nodes (--nodes)")
    targets = weights.fleet_targets(run.blueprint, fleet)
    return pipeline.done(run, _stage(run.blueprint, targets, write_manifest, timeout_s))


def _stage(bp: Blueprint, targets: list[SshNode], write_manifest: bool, timeout_s: float | None) -> StagedWeights:
    manifest = weights.make_manifest(bp, write_manifest)
    weights.plan_transfer(bp, manifest, weights.probe_nodes(bp, targets, manifest))
    return weights.stage_weights(bp, targets, manifest, timeout_s)
