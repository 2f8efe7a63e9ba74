"""The whole migration: the plan first, then each stage in order, resumable by run id.

Re-running with the same run id skips the stages the ledger says are done, after checking that
what they made still exists, and continues; once one stage runs again (a new reservation, new
nodes), every later stage runs again too (``tasks.planning.resume``). A failed stage leaves a
clear state: what exists, what it costs per hour, and the command that tears it down (a markdown
artifact and the log).
"""

from __future__ import annotations

from typing import Literal

from prefect import flow, get_run_logger
from pydantic import BaseModel, Field

from tasks import migrate as steps
from tasks import plan as plan_tasks

Stage = Literal["reserve", "launch", "fabric", "weights", "deploy", "benchmark"]
ALL_STAGES: tuple[Stage, ...] = ("reserve", "launch", "fabric", "weights", "deploy", "benchmark")
# A redeploy or rollout onto a fleet: new weights or image, a new candidate, a new verdict.
REDEPLOY_STAGES: list[Stage] = ["weights", "deploy", "benchmark"]


class MigrateParams(BaseModel):
    """What the Prefect UI form asks for (kept flat: the UI's form handles flat models best)."""

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


@flow(name="migrate", log_prints=True)
def migrate(params: MigrateParams = MigrateParams()) -> dict:
    log = get_run_logger()
    blueprint = plan_tasks.load(params.blueprint)
    plan_tasks.publish_plan(plan_tasks.plan(blueprint))
    if params.dry_run:
        return {"dry_run": True, "stages": []}
    steps.check_capacity_block_approval(blueprint, params.approve_capacity_block_purchase)
    run_id = steps.run_id_for(params.blueprint, params.run_id)
    wanted = [s for s in ALL_STAGES if s in params.stages and s not in params.skip]
    summary: list[dict] = []
    skipped = steps.stages_to_skip(params.blueprint, run_id, wanted, params.rerun)
    for stage in wanted:
        if stage in skipped:
            log.info("stage %s: done in an earlier attempt of run %s, and still there; skipped", stage, run_id)
            summary.append({"stage": stage, "status": "skipped (done)", "seconds": 0.0})
            continue
        log.info("stage %s: started", stage)
        try:
            summary.append(steps.run_stage(stage, params.blueprint, run_id, params.engine_image))
            log.info("stage %s: done in %.1f s", stage, summary[-1]["seconds"])
        except Exception as e:
            steps.report_failure(params.blueprint, run_id, stage, e)
            raise
    return steps.finish(params.blueprint, run_id, summary)
