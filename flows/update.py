"""An update of the live colour on the fleet a run holds (``redeploy`` and ``rollout``): choose the
strategy (``tasks.planning.strategy``), then run it.

    blue-green  weights, deploy beside the live colour, benchmark, gate: ``migrate``'s stages
    recreate    weights; snapshot the live colour; pull the candidate's images onto its nodes;
                drain (production answers 503 + Retry-After);
                delete the live engines; deploy the candidate on the same nodes; benchmark and
                gate against the same-fleet baseline (the last promotion's); PASS: production
                on the candidate. A FAIL or any error: the candidate deleted, the snapshot
                re-applied and canaried, production back on the previous version.

A recreate cut off mid-way (a killed worker) leaves production in maintenance; a re-run of the
same run id finds it so and restores the snapshot before it updates again, so production is
never left without an engine once a run ends. ``rolling`` and ``fleet`` are refused before
anything is touched, naming the strategies that are available.
"""

from __future__ import annotations

import time

from prefect import flow, get_run_logger

from flows import pipeline
from flows.benchmark import benchmark_flow
from flows.deploy import deploy_flow
from flows.migrate import REDEPLOY_STAGES, STAGE_FLOWS, MigrateParams, migrate
from tasks import update as tasks
from tasks.errors import StageFailed
from tasks.planning.strategy import Strategy
from tasks.planning.manifests.common import other_colour
from tasks.runs import Run


def update(blueprint_path: str, run_id: str | None, strategy: Strategy = "auto") -> dict:
    run = pipeline.start(blueprint_path, run_id)
    choice = tasks.choose_strategy(run, strategy)
    if choice.strategy == "blue-green":
        result = migrate(MigrateParams(blueprint=blueprint_path, run_id=run.run_id, stages=REDEPLOY_STAGES,
                                       rerun=REDEPLOY_STAGES))
        return {**result, "strategy": "blue-green", "strategy_reason": choice.reason}
    if choice.strategy == "recreate":
        pipeline.run_stages(run, ["weights"], ["weights"], STAGE_FLOWS)
        return {**recreate(run), "strategy": "recreate", "strategy_reason": choice.reason}
    raise StageFailed(f"{run.blueprint.name}: strategy {choice.strategy} cannot run here; nothing was touched")


def recreate(run: Run) -> dict:
    """The recreate sequence; returns its outcome with the downtime (production's switch to
    maintenance to its first answer from the new version), its phases in seconds, and the
    downtime ``pdlift plan`` estimated for it."""
    log, bp = get_run_logger(), run.blueprint
    estimate = tasks.estimate_downtime(run)
    retry_after = max(1, int(estimate.expected_s))  # what a client is told to wait
    cut_off = tasks.in_maintenance(run)
    if cut_off is not None:
        previous, snap = cut_off.restores_to, tasks.snapshot(run, cut_off.restores_to, running=False)
        if tasks.candidate_is_up(run, other_colour(previous), cut_off.generation_before):
            # Replayed after a crash (or a suspension) past this recreate's own bring-up: its
            # candidate is up and its measurement is cached: judge it, do not tear it down.
            log.info(f"{bp.name}: production in maintenance with {other_colour(previous)} up: continuing at its gate")
            return _gate_or_restore(run, snap, {}, None, retry_after, estimate)
        log.warning(f"{bp.name}: production is in maintenance (an earlier recreate was cut off): restoring "
                    f"{previous} first")
        tasks.remove(run, other_colour(previous))
        tasks.restore(run, snap)
    live = tasks.live_colour(run)
    if live is None:
        raise StageFailed(f"{bp.name}: nothing is live to recreate; run `pdlift deploy` (or migrate) first")
    snap = tasks.snapshot(run, live)  # refused before anything is touched when it could not restore
    phases: dict[str, float] = {"prepull": tasks.prepull(run, live)}  # refused while production still serves
    down_at = None
    try:
        drained, down_at = tasks.drain(run, snap, retry_after, tasks.generation(run))
        phases |= drained
        mark = time.monotonic()
        tasks.remove(run, live)
        phases["remove"] = round(time.monotonic() - mark, 3)
        mark = time.monotonic()
        deploy_flow(run.blueprint_path, run.run_id, colour=other_colour(live))
        phases["bring_up"] = round(time.monotonic() - mark, 3)
    except Exception:
        _restore(run, snap, phases, down_at, retry_after)
        raise
    return _gate_or_restore(run, snap, phases, down_at, retry_after, estimate)


def _gate_or_restore(run: Run, snap, phases: dict[str, float], down_at: float | None, retry_after: int,
                     estimate) -> dict:
    """Benchmark and gate the candidate. An INCONCLUSIVE verdict waits for a person like any gate
    (production stays in maintenance meanwhile: the plan's worst case counts the wait)."""
    bp, live, candidate = run.blueprint, snap.colour, other_colour(snap.colour)
    try:
        mark = time.monotonic()
        gate = benchmark_flow(run.blueprint_path, run.run_id, colour=candidate)
        phases["benchmark_and_switch"] = round(time.monotonic() - mark, 3)
    except Exception:
        _restore(run, snap, phases, down_at, retry_after)
        raise
    tasks.close_maintenance(run)  # production is on the candidate: a failed clean-up only warns
    if down_at is not None and gate.promotion is not None:
        phases["downtime"] = round(gate.promotion.answered_at - down_at, 3)
    get_run_logger().info(f"{bp.name}: production on {candidate}: " + _rows(phases))
    return {"deployment": bp.name, "previous": live, "colour": candidate, "outcome": gate.outcome,
            "phases_s": phases, "downtime_estimate_s": estimate.expected_s,
            "downtime_estimate_phases_s": estimate.phases_s}


def _restore(run: Run, snap, phases: dict[str, float], down_at: float | None, retry_after: int) -> None:
    """After a FAIL or any error: production off the candidate (if it was switched to it), the
    candidate out, the snapshot back (a no-op apply when the live colour was never deleted),
    its canary passed, production on it."""
    log, bp, candidate = get_run_logger(), run.blueprint, other_colour(snap.colour)
    log.error(f"{bp.name}: the recreate of {candidate} did not promote; restoring {snap.colour}")
    tasks.back_to_maintenance(run, snap, retry_after)
    mark = time.monotonic()
    tasks.remove(run, candidate)
    phases["remove_candidate"] = round(time.monotonic() - mark, 3)
    restored, up_at = tasks.restore(run, snap)
    phases |= restored
    if down_at is not None:
        phases["downtime"] = round(up_at - down_at, 3)
    log.warning(f"{bp.name}: production back on {snap.colour} (revision {snap.revision}): " + _rows(phases))


def _rows(phases: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.1f} s" for k, v in phases.items())


@flow(name="recreate")
def recreate_flow(blueprint_path: str, run_id: str | None = None) -> dict:
    """The recreate strategy alone, on the run's current weights (``redeploy --strategy recreate``
    stages the weights first)."""
    return recreate(pipeline.start(blueprint_path, run_id))
