"""Thin Prefect tasks for stage 3: validate the EFA fabric of the launched fleet, replace bad nodes.

The procedure is ``tasks/stages/fabric.py`` (layers, replacement loop); ``fabric_run`` wires it
to the run's ledger, the AWS/EKS adapters and the SSH shell. The report is a markdown artifact;
the raw results stay under the run's state folder for trend baselines.
"""

from __future__ import annotations


from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from tasks.planning.identity import artifact_key
from tasks.runs import Run
from tasks.stages import fabric_run


@task(cache_policy=NO_CACHE)  # a probe of live hardware: never replay a cached verdict
def validate_fabric(run: Run) -> dict:
    """Validate every node's GPUs, EFA devices and links; raise FabricCheckFailed when it fails."""
    done = fabric_run.validate_run(run, get_run_logger().info)
    key = artifact_key("fabric-report", run.blueprint.name)
    create_markdown_artifact(markdown=done.markdown, key=key,
                             description=f"fabric validation of run {run.identity.run_id}")
    done.outcome.raise_for_failure()
    return done.summary
