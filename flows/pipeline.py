"""The pipeline runner: how a stage flow opens its run, the one place a stage is recorded as done,
and the loop that runs the wanted stages in order (``migrate``, ``redeploy``, ``rollout``).

Every stage flow, whether ``migrate`` runs it as a subflow or an operator runs it alone
(``pdlift reserve``, the Prefect UI), ends with ``done(run, record)``: its typed record goes to
the run's ledger there and nowhere else. Resuming is decided before the loop
(``tasks.pipeline.stages_to_skip``): only a leading run of stages that are still done is skipped.

A Capacity Block is sold for a start hours or days ahead, and EC2 refuses launches into it until
then. ``wait_for_capacity`` (before the launch) lets a deployment's run go: the flow run is
rescheduled for the block's StartDate (state ``AwaitingCapacity``, in the UI with that time),
its process exits and frees the worker, and at the start a worker runs it again from the top;
the ledger then skips the reserve stage and the launch follows. A run without a deployment (the
CLI, tests) cannot be rescheduled by anyone: it waits in its own process. Either way a markdown
artifact says when it resumes and what it costs meanwhile.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Mapping, Sequence

from prefect import get_client, get_run_logger
from prefect.context import FlowRunContext
from prefect.exceptions import Pause
from prefect.states import Scheduled
from prefect.utilities.engine import propose_state_sync

from tasks import pipeline as pipeline_tasks
from tasks import reserve as reserve_tasks
from tasks.planning import records, resume
from tasks.planning.records import StageRecord
from tasks.runs import Run

AWAITING_CAPACITY = "AwaitingCapacity"
WAIT_LOG_EVERY_S = 60.0

StageFlow = Callable[[Run], StageRecord]


def start(blueprint_path: str, run_id: str | None, hold: bool = True) -> Run:
    """The run a stage flow works on: the blueprint read once, its lease taken (not by a teardown,
    which must be able to release a run whatever holds it), the ledger as the store has it."""
    return pipeline_tasks.start_run(blueprint_path, run_id, hold)


def done(run: Run, record: StageRecord, keep_lease: bool = False) -> StageRecord:
    """Record ``record``'s stage as done for ``run`` (the only caller of ``Run.finish_stage``);
    ``keep_lease``: this flow goes on working on the run (a fleet update's handover records)."""
    pipeline_tasks.record_stage(run, record, release=not keep_lease)
    return record


def run_stages(run: Run, wanted: Sequence[str], rerun: Sequence[str],
               stage_flows: Mapping[str, StageFlow]) -> list[dict]:
    """Run ``wanted`` in pipeline order, skipping what is still done; on a failure, report what
    exists and what it costs (artifact and log), then raise. One summary row per stage."""
    log = get_run_logger()
    skipped = pipeline_tasks.stages_to_skip(run, list(wanted), list(rerun))
    summary: list[dict] = []
    for stage in wanted:
        if stage in skipped:
            log.info("stage %s: done in an earlier attempt of run %s, and still there; skipped", stage, run.run_id)
            summary.append({"stage": stage, "status": "skipped (done)", "seconds": 0.0})
            continue
        log.info("stage %s: started", stage)
        started = time.monotonic()
        try:
            record = stage_flows[stage](run)
        except Exception as e:
            pipeline_tasks.report_failure(run, stage, e)
            raise
        seconds = round(time.monotonic() - started, 1)
        log.info("stage %s: done in %.1f s", stage, seconds)
        summary.append({"stage": stage, "status": "done", "seconds": seconds, "output": records.to_dict(record)})
    return summary


def wait_for_capacity(run: Run, sleep: Callable[[float], None] = time.sleep) -> None:
    """Return once the run's Capacity Block has begun (at once when it has, or there is none).
    Call it from the top-level flow: a subflow cannot be rescheduled on its own."""
    run.reload()
    wait = resume.capacity_wait(run.ledger, dt.datetime.now(dt.timezone.utc))
    if wait is None:
        return
    log = get_run_logger()
    context = FlowRunContext.get()
    flow_run = context.flow_run if context else None
    if flow_run is not None and flow_run.deployment_id:
        reserve_tasks.publish_capacity_wait(run, wait, f"this flow run is rescheduled for then (state "
                                                       f"{AWAITING_CAPACITY}); no worker is held meanwhile")
        log.info("Capacity Block %s begins at %s: rescheduling this flow run for then, freeing the worker",
                 wait.reservation_id, wait.starts_at.isoformat())
        pipeline_tasks.release_run.fn(run)  # a teardown meanwhile must not wait for this run's lease
        _reschedule(flow_run.id, wait)
    reserve_tasks.publish_capacity_wait(run, wait, "this run has no deployment to reschedule, so it waits in "
                                                   "its own process")
    while (left := (wait.starts_at - dt.datetime.now(dt.timezone.utc)).total_seconds()) > 0:
        log.info("Capacity Block %s begins in %.0f s (at %s); waiting", wait.reservation_id, left,
                 wait.starts_at.isoformat())
        sleep(min(left, WAIT_LOG_EVERY_S))


def _reschedule(flow_run_id, wait: resume.CapacityWait) -> None:
    """Set this flow run to Scheduled at the block's start and leave (``Pause``: the engine exits
    the process cleanly, as it does for ``suspend_flow_run``). RUNNING -> SCHEDULED is the server's
    own path for a flow run's retry (AwaitingRetry); a worker starts it again at that time."""
    state = Scheduled(scheduled_time=wait.starts_at, name=AWAITING_CAPACITY,
                      message=f"Capacity Block {wait.reservation_id} begins at {wait.starts_at.isoformat()}")
    with get_client(sync_client=True) as client:
        accepted = propose_state_sync(client, state, flow_run_id=flow_run_id)
    if not accepted.is_scheduled():
        raise RuntimeError(f"Prefect did not reschedule flow run {flow_run_id}: {accepted.type.value} "
                           f"{accepted.name}")
    raise Pause(state=accepted)
