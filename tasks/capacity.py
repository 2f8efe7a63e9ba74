"""Thin Prefect tasks for stages 1-2 (reserve, launch) and teardown/sweep."""

from __future__ import annotations

import dataclasses
import datetime as dt

from prefect import task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from blueprints.loader import load_blueprint
from tasks.adapters import eks as eks_adapter
from tasks.adapters.kube_nodes import KubeNodes
from tasks.errors import retry_if_transient
from tasks.planning import ledger as ledger_plan
from tasks.runs import Run, aws_adapters, open_run
from tasks.stages import launch as launch_stage
from tasks.stages import reserve as reserve_stage
from tasks.stages import teardown as teardown_stage


@task(cache_policy=NO_CACHE)
def start_run(blueprint_path: str, run_id: str | None) -> Run:
    return open_run(load_blueprint(blueprint_path), run_id)


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[5, 30], retry_condition_fn=retry_if_transient)
def preflight(run: Run) -> list[str]:
    return reserve_stage.preflight(run.blueprint, aws_adapters(run.blueprint).capacity)


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[10, 60], retry_condition_fn=retry_if_transient)
def reserve(run: Run) -> reserve_stage.Reserved:
    reserved = reserve_stage.reserve(run.blueprint, run.identity, aws_adapters(run.blueprint).capacity, run.record)
    run.stage_done("reserve", dataclasses.asdict(reserved))
    return reserved


@task(cache_policy=NO_CACHE)
def launch(run: Run, reserved: reserve_stage.Reserved) -> launch_stage.Fleet:
    aws = aws_adapters(run.blueprint)
    cluster = eks_adapter.describe_cluster(aws.eks, run.blueprint.aws.eks.cluster)
    kube = KubeNodes(eks_adapter.api_client(cluster, aws.sts))
    fleet = launch_stage.launch(run.blueprint, run.identity, reserved, aws.capacity, aws.instances, cluster,
                                kube, run.record)
    run.stage_done("launch", dataclasses.asdict(fleet))
    return fleet


@task(cache_policy=NO_CACHE)
def publish_ledger(run: Run) -> str:
    return _publish(run.ledger)


@task(cache_policy=NO_CACHE)
def publish_ledgers(blueprint_path: str, run_ids: list[str]) -> list[str]:
    """The final cost ledger of each run a teardown touched (with end times)."""
    from tasks.adapters.ledger_store import LedgerStore

    bp, store = load_blueprint(blueprint_path), LedgerStore()
    return [_publish(ledger) for rid in run_ids if (ledger := store.load(bp.name, rid)) is not None]


def _publish(ledger) -> str:
    markdown = ledger_plan.render_markdown(ledger, dt.datetime.now(dt.timezone.utc))
    create_markdown_artifact(markdown=markdown, key=f"cost-ledger-{ledger.deployment}",
                             description=f"cost ledger of run {ledger.run_id}")
    return markdown


@task(cache_policy=NO_CACHE)
def teardown(blueprint_path: str, run_id: str | None) -> teardown_stage.TeardownReport:
    """Release every resource tagged with this deployment (and run, when given)."""
    bp = load_blueprint(blueprint_path)
    aws = aws_adapters(bp)
    found = teardown_stage.inventory(aws.capacity, aws.instances, bp.name, run_id)
    kube = _kube_or_none(bp)
    report = teardown_stage.release(found, aws.capacity, aws.instances, kube=kube, deployments={bp.name})
    _mark_ended(bp, report)
    return report


@task(cache_policy=NO_CACHE)
def sweep(region: str, apply: bool, active_runs: list[str]) -> dict:
    """List pdlift-tagged resources past their TTL or of no active run; release them with apply."""
    cap, inst = _region_adapters(region)
    found = teardown_stage.inventory(cap, inst, None, None)
    stale = teardown_stage.stale(found, dt.datetime.now(dt.timezone.utc), set(active_runs))
    report = teardown_stage.release(stale, cap, inst) if apply and stale else None
    return {"found": [dataclasses.asdict(f) for f in found], "stale": [dataclasses.asdict(f) for f in stale],
            "released": report.lines() if report else []}


def _kube_or_none(bp):
    from tasks.errors import PdliftError

    aws = aws_adapters(bp)
    try:
        cluster = eks_adapter.describe_cluster(aws.eks, bp.aws.eks.cluster)
        return KubeNodes(eks_adapter.api_client(cluster, aws.sts))
    except PdliftError:
        return None  # no cluster to clean (not created, or unreachable): EC2 teardown still runs


def _mark_ended(bp, report: teardown_stage.TeardownReport) -> None:
    from tasks.adapters.ledger_store import LedgerStore

    store, now = LedgerStore(), dt.datetime.now(dt.timezone.utc)
    for run_id in {f.run_id for f in report.released if f.run_id}:
        ledger = store.load(bp.name, run_id)
        if ledger is None:
            continue
        for f in report.released:
            if f.run_id == run_id:
                ledger = ledger.ended(f.kind, f.resource_id, now)
        store.save(ledger.with_stage("teardown", {"released": len(report.released)}))


def _region_adapters(region: str):
    from tasks.adapters import aws_client
    from tasks.adapters.ec2_capacity import Ec2Capacity
    from tasks.adapters.ec2_instances import Ec2Instances

    describe, create = aws_client.clients(aws_client.session(region), "ec2")
    return Ec2Capacity(describe, create), Ec2Instances(describe, create)
