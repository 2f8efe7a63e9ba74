"""The whole migration: the plan first, then each stage in order, resumable by run id.

Re-running with the same run id skips the stages the ledger says are done, after checking that
what they made still exists, and continues (a run whose Capacity Block begins later is
rescheduled for its start and continues so: ``flows.pipeline.wait_for_capacity``); once one
stage runs again (a new reservation, new nodes), every later stage runs again too
(``tasks.planning.resume``). A failed stage leaves a clear state: what exists, what it costs per
hour, and the command that tears it down (a markdown artifact and the log).
"""

from __future__ import annotations

from typing import Literal, get_args

from prefect import flow
from pydantic import BaseModel, ConfigDict, Field

from flows import pipeline
from flows.benchmark import benchmark_flow
from flows.deploy import deploy_flow
from flows.fabric import fabric_flow
from flows.launch import launch_flow
from flows.pipeline import StageFlow
from flows.reserve import reserve_flow
from flows.weights import weights_flow
from tasks import pipeline as pipeline_tasks
from tasks import plan as plan_tasks
from tasks.planning.approval import check_capacity_block_approval
from tasks.planning.records import StagedWeights
from tasks.runs import Run

Stage = Literal["reserve", "launch", "fabric", "weights", "deploy", "benchmark"]
ALL_STAGES: tuple[Stage, ...] = get_args(Stage)  # pipeline order; tasks.planning.records.PIPELINE
# A redeploy or rollout onto a fleet: new weights or image, a new candidate, a new verdict.
REDEPLOY_STAGES: list[Stage] = ["weights", "deploy", "benchmark"]


class MigrateParams(BaseModel):
    """What the Prefect UI form asks for (kept flat: the UI's form handles flat models best).
    An unknown key is refused (the deployment's schema says so, the API answers 409): a misspelt
    ``dry_run`` must not start a whole migration."""

    model_config = ConfigDict(extra="forbid")

    blueprint: str = Field("blueprints/sandbox-2p2d.yaml", description="Blueprint file, relative to the repo.")
    run_id: str | None = Field(None, description="Resume this run; empty: derived from the blueprint.")
    stages: list[Stage] = Field(list(ALL_STAGES), description="Stages to run, in pipeline order.")
    skip: list[Stage] = Field(default_factory=list, description="Stages to leave out.")
    rerun: list[Stage] = Field(default_factory=list,
                               description="Stages to run again even if an earlier attempt of this run id did them.")
    dry_run: bool = Field(False, description="Only the plan: touch nothing.")
    approve_capacity_block_purchase: bool = Field(
        False, description="Allow buying a Capacity Block (upfront, cannot be cancelled) when the blueprint asks.")
    engine_image: str | None = Field(None, description="Override the engine image (rollouts).")


def _weights(run: Run) -> StagedWeights:
    # write_manifest: objects with no S3 checksum are hashed once into pdlift-manifest.json (reused after)
    return weights_flow(run.blueprint_path, run.run_id, write_manifest=True)


def _launch(run: Run):
    # Here, in migrate's own flow run: a Capacity Block that begins later frees the worker until
    # then (a subflow could not be rescheduled on its own).
    pipeline.wait_for_capacity(run)
    return launch_flow(run.blueprint_path, run.run_id)


STAGE_FLOWS: dict[str, StageFlow] = {
    "reserve": lambda run: reserve_flow(run.blueprint_path, run.run_id),
    "launch": _launch,
    "fabric": lambda run: fabric_flow(run.blueprint_path, run.run_id),
    "weights": _weights,
    "deploy": lambda run: deploy_flow(run.blueprint_path, run.run_id),
    "benchmark": lambda run: benchmark_flow(run.blueprint_path, run.run_id),
}


@flow(name="migrate", log_prints=True)
def migrate(params: MigrateParams = MigrateParams()) -> dict:
    blueprint = plan_tasks.load(params.blueprint)
    plan_tasks.publish_plan(plan_tasks.plan(blueprint))
    if params.dry_run:  # touches nothing, reads no run state
        return {"dry_run": True, "stages": []}
    check_capacity_block_approval(blueprint, params.approve_capacity_block_purchase)
    run = pipeline.start(params.blueprint, params.run_id)
    wanted = [s for s in ALL_STAGES if s in params.stages and s not in params.skip]
    summary = pipeline.run_stages(run, wanted, params.rerun, STAGE_FLOWS)
    return pipeline_tasks.finish(run, summary)
