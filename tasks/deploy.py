"""Thin Prefect tasks for stage 5: deploy the candidate colour, prove its KV path, roll it back.

Which cluster: ``KUBECONFIG``, when set, wins (an operator's explicit choice, and how the
sandbox is selected); its current context must name the blueprint's EKS cluster. Otherwise the
client is built from the blueprint's EKS cluster (DescribeCluster + a presigned STS token,
``tasks.adapters.eks``). Clients are built per task run, never at import time.
"""

from __future__ import annotations

import os
import uuid

from kubernetes import client as k8s
from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from blueprints.schema import Blueprint
from tasks.adapters import eks as eks_adapter
from tasks.adapters.engine_http import EngineHttp
from tasks.adapters.kube_apply import KubeApply, api_client_from_kubeconfig
from tasks.runs import Run, aws_adapters
from tasks.stages import deploy as stage
from tasks.stages.deploy_wait import StackFailure, WaitLimits


def kube_api_client(bp: Blueprint) -> k8s.ApiClient:
    """KUBECONFIG when set (checked against the blueprint's cluster), else the EKS cluster."""
    path = os.environ.get("KUBECONFIG")
    if path:
        return api_client_from_kubeconfig(path, bp.aws.eks.cluster)
    aws = aws_adapters(bp)
    return eks_adapter.api_client(eks_adapter.describe_cluster(aws.eks, bp.aws.eks.cluster), aws.sts)


@task(cache_policy=NO_CACHE)
def choose_colour(bp: Blueprint, requested: str | None = None) -> str:
    """The colour the production Service does not select (or ``requested``, if it is not live)."""
    with kube_api_client(bp) as api:
        candidate, live = stage.candidate_colour(bp, KubeApply(api), requested)
    get_run_logger().info(f"{bp.name}: live colour {live or 'none'}, candidate {candidate}")
    return candidate


@task(cache_policy=NO_CACHE)
def deploy_candidate(run: Run, colour: str | None = None, poll_s: float = 5.0) -> stage.Deployed:
    """Apply, wait, canary. On failure the diagnostics (events, log tails) become an artifact."""
    bp, log = run.blueprint, get_run_logger()
    options = stage.DeployOptions(limits=WaitLimits(poll_s=poll_s))
    with kube_api_client(bp) as api, EngineHttp() as http:
        try:
            deployed = stage.deploy(bp, KubeApply(api), http, colour, options, progress=log.info)
        except StackFailure as e:
            create_markdown_artifact(markdown=f"# {bp.name}: candidate failed ({e.reason})\n\n```\n"
                                              f"{e.diagnostics}\n```\n", key=f"deploy-failure-{bp.name}",
                                     description=f"why the candidate of {bp.name} did not come up")
            raise
    # The generation tells one deploy of this run from the next (redeploys reuse the fleet's run
    # id): the benchmark and the gate are cached per generation, never across deploys.
    run.stage_done("deploy", {"colour": deployed.colour, "live_colour": deployed.live_colour,
                              "generation": uuid.uuid4().hex[:12],
                              "engines_namespace": deployed.engines_namespace,
                              "router_service": f"{deployed.router_namespace}/{deployed.router_service}",
                              "phases_s": deployed.phases_s, "bring_up_s": deployed.bring_up_s,
                              "canary": deployed.canary})
    return deployed


@task(cache_policy=NO_CACHE)
def rollback_candidate(bp: Blueprint, colour: str) -> stage.RolledBack:
    with kube_api_client(bp) as api:
        return stage.rollback(bp, KubeApply(api), colour)


@task(cache_policy=NO_CACHE)
def publish(deployed: stage.Deployed) -> str:
    rows = "\n".join(f"| {phase} | {seconds:.1f} |" for phase, seconds in deployed.phases_s.items())
    markdown = (f"# {deployed.deployment}: candidate {deployed.colour} is up\n\n"
                f"Live colour: {deployed.live_colour or 'none'}; candidate router: "
                f"`{deployed.router_namespace}/{deployed.router_service}`; bring-up {deployed.bring_up_s:.1f} s "
                f"(apply to canary passed).\n\n| phase | seconds |\n|---|---|\n{rows}\n\n{deployed.canary}\n")
    create_markdown_artifact(markdown=markdown, key=f"deploy-{deployed.deployment}",
                             description=f"candidate {deployed.colour} of {deployed.deployment}")
    return markdown
