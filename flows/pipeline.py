"""The pipeline runner: how a stage flow opens its run, the one place a stage is recorded as done,
and the loop that runs the wanted stages in order (``migrate``, ``redeploy``, ``rollout``).

Every stage flow, whether ``migrate`` runs it as a subflow or an operator runs it alone
(``pdlift reserve``, the Prefect UI), ends with ``done(run, record)``: its typed record goes to
the run's ledger there and nowhere else. Resuming is decided before the loop
(``tasks.pipeline.stages_to_skip``): only a leading run of stages that are still done is skipped.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from prefect import get_run_logger

from tasks import pipeline as pipeline_tasks
from tasks.planning import records
from tasks.planning.records import StageRecord
from tasks.runs import Run

StageFlow = Callable[[Run], StageRecord]


def start(blueprint_path: str, run_id: str | None, hold: bool = True) -> Run:
    """The run a stage flow works on: the blueprint read once, its lease taken (not by a teardown,
    which must be able to release a run whatever holds it), the ledger as the store has it."""
    return pipeline_tasks.start_run(blueprint_path, run_id, hold)


def done(run: Run, record: StageRecord) -> StageRecord:
    """Record ``record``'s stage as done for ``run`` (the only caller of ``Run.finish_stage``)."""
    pipeline_tasks.record_stage(run, record)
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
