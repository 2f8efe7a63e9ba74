"""Thin Prefect tasks for stage 4: stage the model weights from S3 to every node's NVMe (``tasks.stages.weights``).

manifest (S3, orchestrator side) -> ship the stager and probe each node -> plan the transfer
(refuse before any byte moves if a node lacks space) -> run the stager on all nodes at once,
with progress artifacts per node and in total, and a throughput table.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

from prefect import get_run_logger, task
from prefect.artifacts import create_progress_artifact, create_table_artifact, update_progress_artifact
from prefect.cache_policies import NO_CACHE

from blueprints.schema import Blueprint
from tasks.adapters.s3 import manifest_for
from tasks.adapters.ssh import SshNode
from tasks.errors import ConfigError, retry_if_transient
from tasks.planning.identity import artifact_key
from tasks.planning.records import Fleet, StagedWeights
from tasks.planning.staging import Manifest, NodeProbe, StagingPlan, check_safetensors_header, plan_staging
from tasks.planning.staging_progress import NodeProgress, throughput_rows, total
from tasks.progress import Listeners
from tasks.stages import weights as stage
from tasks.stages.nodes import pin, ssh_target
from tasks.wiring import Wiring

# Line rate of the path S3 traffic takes (the ENA, not EFA); 100 Gbps is assumed
# (docs/sources.md#s3-path-is-ena).
S3_LINE_RATE_GBPS = {"p5en.48xlarge": 100.0, "p5e.48xlarge": 100.0, "p5.48xlarge": 100.0}

Listener = Callable[[list[NodeProgress]], None]
_listeners: Listeners[Listener] = Listeners()


def progress_listener(fn: Listener) -> contextlib.AbstractContextManager[None]:
    """Call ``fn(snapshot)`` on every progress tick of ``stage`` in this process (the CLI's bar)."""
    return _listeners.listening(fn)


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[5, 30], retry_condition_fn=retry_if_transient)
def fleet_targets(bp: Blueprint, fleet: Fleet) -> list[SshNode]:
    """The run's nodes as SSH targets, host keys pinned from each instance's console output."""
    with Wiring(bp) as wiring:
        return [ssh_target(n, bp.aws.ssh.port) for n in pin(wiring.instances, fleet.nodes)]


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[2, 10], retry_condition_fn=retry_if_transient)
def make_manifest(bp: Blueprint, write_missing: bool = False) -> Manifest:
    """List the weights with their checksums and check every safetensors header.

    ``write_missing`` first hashes objects that have no checksum anywhere (pdlift-manifest.json).
    """
    with Wiring(bp) as wiring:
        store = wiring.weight_store
        manifest = manifest_for(store, bp.model.weights_uri, write_missing)
        shards = [e for e in manifest.entries if e.key.endswith(".safetensors")]
        store.map(lambda e: check_safetensors_header(
            e.key, store.safetensors_header(manifest.bucket, e.key, e.size, e.etag), e.size), shards)
    get_run_logger().info("manifest: %d objects, %.2f GB, %d safetensors headers checked",
                          len(manifest.entries), manifest.total_bytes / 1e9, len(shards))
    return manifest


@task(cache_policy=NO_CACHE)
def probe_nodes(bp: Blueprint, nodes: list[SshNode], manifest: Manifest) -> list[NodeProbe]:
    """Ship the stager to every node and ask what it already has and how much space is free."""
    names = [n.name for n in nodes]
    if not nodes or len(set(names)) != len(names):
        raise ConfigError(f"staging needs a non-empty list of distinct nodes, got {names}")
    with Wiring(bp) as wiring:
        return stage.probe(wiring.shell, nodes, manifest, bp.staging)


@task(cache_policy=NO_CACHE)
def plan_transfer(bp: Blueprint, manifest: Manifest, probes: list[NodeProbe]) -> StagingPlan:
    staging_plan = plan_staging(manifest, probes, bp.staging.free_space_margin, bp.staging.concurrency,
                                S3_LINE_RATE_GBPS.get(bp.aws.instance_type))
    logger = get_run_logger()
    for warning in staging_plan.warnings:
        logger.warning(warning)
    logger.info("staging plan: fetch %.2f GB over %d node(s); %.2f GB already there",
                staging_plan.fetch_bytes / 1e9, len(staging_plan.nodes),
                sum(n.present_bytes for n in staging_plan.nodes) / 1e9)
    return staging_plan


@task(cache_policy=NO_CACHE)
def stage_weights(bp: Blueprint, nodes: list[SshNode], manifest: Manifest,
                  timeout_s: float | None = None) -> StagedWeights:
    """Run the stager on all nodes at once; fails naming node, key and reason."""
    artifacts, listeners = ProgressArtifacts(bp.name), _listeners.snapshot()

    def on_progress(snapshot: list[NodeProgress], final: bool) -> None:
        artifacts.update(snapshot, force=final)
        for listener in listeners:
            listener(snapshot)
        if final:
            artifacts.finish(snapshot)

    with Wiring(bp) as wiring:
        return stage.stage(wiring.shell, nodes, manifest, bp, wiring.environ, get_run_logger(), on_progress, timeout_s)


class ProgressArtifacts:
    """A progress artifact per node and one in total (made at the first snapshot), updated at most
    every ``min_interval_s``; the throughput table at the end."""

    def __init__(self, deployment: str, min_interval_s: float = 2.0):
        self.deployment, self.min_interval_s = deployment, min_interval_s
        self._ids: dict[str, object] = {}
        self._sent: dict[str, tuple[float, float]] = {}

    def _create(self, snapshot: list[NodeProgress]) -> None:
        self._ids = {p.node: create_progress_artifact(0.0, key=artifact_key(self.deployment, "weights", p.node),
                                                      description=f"weights staged on {p.node}")
                     for p in snapshot}
        self._ids["total"] = create_progress_artifact(0.0, key=artifact_key(self.deployment, "weights-total"),
                                                      description="weights staged, all nodes")

    def update(self, snapshot: list[NodeProgress], force: bool = False) -> None:
        if not self._ids:
            self._create(snapshot)
        now = time.monotonic()
        for p in snapshot + [total(snapshot)]:
            pct = round(p.percent, 1)
            last_pct, last_at = self._sent.get(p.node, (-1.0, 0.0))
            if pct != last_pct and (force or now - last_at >= self.min_interval_s):
                update_progress_artifact(self._ids[p.node], pct)
                self._sent[p.node] = (pct, now)

    def finish(self, snapshot: list[NodeProgress]) -> None:
        create_table_artifact(throughput_rows(snapshot), key=artifact_key(self.deployment, "weights-throughput"),
                              description="weight staging throughput per node")
