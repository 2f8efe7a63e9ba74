"""Thin Prefect tasks for stage 4: stage the model weights from S3 to every node's NVMe.

manifest (S3, orchestrator side) -> ship the stager and probe each node -> plan (refuse before
any byte moves if a node lacks space) -> run the stager on all nodes at once, with progress
artifacts per node and in total, and a throughput table. The node side is
``scripts/node/stage_weights.py``; the driving of many nodes lives in ``tasks/weights_nodes.py``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from blueprints.schema import Blueprint
from tasks import weights_nodes
from tasks.adapters.s3 import WeightStore, manifest_for, s3_client
from tasks.adapters.ssh import NodeShell, SshNode, SshSettings
from tasks.errors import ConfigError, retry_if_transient
from tasks.planning.staging import Manifest, NodeProbe, StagingPlan, check_safetensors_header, plan_staging
from tasks.planning.staging_progress import NodeProgress

# Line rate of the path S3 traffic takes (the ENA, not EFA): reference §3 sizes staging at 100 Gbps.
S3_LINE_RATE_GBPS = {"p5en.48xlarge": 100.0, "p5e.48xlarge": 100.0, "p5.48xlarge": 100.0}

Listener = Callable[[list[NodeProgress]], None]
_listeners: list[Listener] = []


@contextlib.contextmanager
def progress_listener(fn: Listener) -> Iterator[None]:
    """Call ``fn(snapshot)`` on every progress tick of ``stage`` in this process (the CLI's bar)."""
    _listeners.append(fn)
    try:
        yield
    finally:
        _listeners.remove(fn)


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[2, 10], retry_condition_fn=retry_if_transient)
def make_manifest(uri: str, region: str, write_missing: bool = False) -> Manifest:
    """List the weights with their checksums and check every safetensors header.

    ``write_missing`` first hashes objects that have no checksum anywhere (pdlift-manifest.json).
    """
    store = WeightStore(s3_client(region))
    manifest = manifest_for(store, uri, write_missing)
    shards = [e for e in manifest.entries if e.key.endswith(".safetensors")]
    store.map(lambda e: check_safetensors_header(
        e.key, store.safetensors_header(manifest.bucket, e.key, e.size, e.etag), e.size), shards)
    get_run_logger().info("manifest: %d objects, %.2f GB, %d safetensors headers checked",
                          len(manifest.entries), manifest.total_bytes / 1e9, len(shards))
    return manifest


@task(cache_policy=NO_CACHE)
def probe_nodes(blueprint: Blueprint, nodes: list[SshNode], manifest: Manifest) -> list[NodeProbe]:
    """Ship the stager to every node and ask what it already has and how much space is free."""
    names = [n.name for n in nodes]
    if not nodes or len(set(names)) != len(names):
        raise ConfigError(f"staging needs a non-empty list of distinct nodes, got {names}")
    with NodeShell(SshSettings.from_spec(blueprint.aws.ssh)) as shell:
        return weights_nodes.probe(shell, nodes, manifest, blueprint.staging)


@task(cache_policy=NO_CACHE)
def plan(blueprint: Blueprint, manifest: Manifest, probes: list[NodeProbe]) -> StagingPlan:
    staging_plan = plan_staging(manifest, probes, blueprint.staging.free_space_margin,
                                blueprint.staging.concurrency,
                                S3_LINE_RATE_GBPS.get(blueprint.aws.instance_type))
    logger = get_run_logger()
    for warning in staging_plan.warnings:
        logger.warning(warning)
    logger.info("staging plan: fetch %.2f GB over %d node(s); %.2f GB already there",
                staging_plan.fetch_bytes / 1e9, len(staging_plan.nodes),
                sum(n.present_bytes for n in staging_plan.nodes) / 1e9)
    return staging_plan


@task(cache_policy=NO_CACHE)
def stage(blueprint: Blueprint, nodes: list[SshNode], manifest: Manifest,
          timeout_s: float | None = None) -> list[NodeProgress]:
    """Run the stager on all nodes at once; fails naming node, key and reason."""
    with NodeShell(SshSettings.from_spec(blueprint.aws.ssh)) as shell:
        return weights_nodes.stage(shell, nodes, manifest, blueprint, get_run_logger(),
                                   listeners=list(_listeners), timeout_s=timeout_s)
