"""An update of the live colour on the fleet a run holds (``redeploy`` and ``rollout``): choose the
strategy (``tasks.planning.strategy``), then run it.

    blue-green  weights, deploy beside the live colour, benchmark, gate: ``migrate``'s stages
    recreate    weights; snapshot the live colour; drain (production answers 503 + Retry-After);
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
from tasks.planning.manifests.common import SHUTDOWN_TIMEOUT_S
from tasks.planning.strategy import Strategy
from tasks.runs import Run
from tasks.stages import deploy as deploy_stage
from tasks.wiring import Wiring


def update(blueprint_path: str, run_id: str | None, strategy: Strategy = "auto") -> dict:
    run = pipeline.start(blueprint_path, run_id)
    choice = tasks.choose_strategy(run, strategy)
    if choice.strategy == "blue-green":
        result = migrate(MigrateParams(blueprint=blueprint_path, run_id=run.run_id, stages=REDEPLOY_STAGES,
                                       rerun=REDEPLOY_STAGES))
        return {**result, "strategy": "blue-green", "strategy_reason": choice.reason}
    if choice.strategy == "recreate":
        estimate = tasks.estimate_downtime(run)
        pipeline.run_stages(run, ["weights"], ["weights"], STAGE_FLOWS)
        return {**recreate(run), "strategy": "recreate", "strategy_reason": choice.reason,
                "downtime_estimate_s": estimate.expected_s, "downtime_estimate_phases_s": estimate.phases_s}
    raise StageFailed(f"{run.blueprint.name}: strategy {choice.strategy} ({choice.reason}) is not available in "
                      "this version of pdlift; nothing was touched. Available: blue-green (needs room beside "
                      "the live colour) and recreate (downtime: set promotion.allow_downtime, or --strategy "
                      "recreate)")


def _live_colour(run: Run) -> str | None:
    with Wiring(run.blueprint) as wiring:
        return deploy_stage.live_colour(run.blueprint, wiring.kube)


def recreate(run: Run) -> dict:
    """The recreate sequence; returns its outcome with the downtime (production's switch to
    maintenance to its first answer from the new version) and its phases, in seconds."""
    log, bp = get_run_logger(), run.blueprint
    previous = tasks.in_maintenance(run)
    if previous is not None and _candidate_is_up(run, _other(previous)):
        # Replayed after a suspension for approval (or a crash after the bring-up): the candidate
        # is up, its measurement and verdict are cached: judge it again, do not tear it down.
        snap = tasks.snapshot(run, previous, running=False)
        log.info(f"{bp.name}: production in maintenance with {_other(previous)} up: continuing at its gate")
        return _gate_or_restore(run, previous, snap, {}, None)
    if previous is not None:
        log.warning(f"{bp.name}: production is in maintenance (an earlier recreate was cut off): restoring "
                    f"{previous} first")
        snap = tasks.snapshot(run, previous, running=False)
        tasks.remove(run, _other(previous))
        tasks.restore(run, snap)
    live = _live_colour(run)
    if live is None:
        raise StageFailed(f"{bp.name}: nothing is live to recreate; run `pdlift deploy` (or migrate) first")
    snap = tasks.snapshot(run, live)
    phases, down_at = tasks.drain(run, live, SHUTDOWN_TIMEOUT_S)
    try:
        mark = time.monotonic()
        tasks.remove(run, live)
        phases["remove"] = round(time.monotonic() - mark, 3)
        mark = time.monotonic()
        deploy_flow(run.blueprint_path, run.run_id, colour=_other(live))
        phases["bring_up"] = round(time.monotonic() - mark, 3)
    except Exception:
        _restore(run, live, snap, phases, down_at)
        raise
    return _gate_or_restore(run, live, snap, phases, down_at)


def _gate_or_restore(run: Run, live: str, snap, phases: dict[str, float], down_at: float | None) -> dict:
    bp, candidate = run.blueprint, _other(live)
    try:
        mark = time.monotonic()
        gate = benchmark_flow(run.blueprint_path, run.run_id, colour=candidate)
        phases["benchmark_and_switch"] = round(time.monotonic() - mark, 3)
        tasks.close_maintenance(run)
    except Exception:
        _restore(run, live, snap, phases, down_at)
        raise
    if down_at is not None and gate.promotion is not None:
        phases["downtime"] = round(gate.promotion.answered_at - down_at, 3)
    get_run_logger().info(f"{bp.name}: production on {candidate}: " + _rows(phases))
    return {"deployment": bp.name, "previous": live, "colour": candidate, "outcome": gate.outcome,
            "phases_s": phases}


def _restore(run: Run, live: str, snap, phases: dict[str, float], down_at: float | None) -> None:
    """After a FAIL or an error: the candidate out, the snapshot back, production on it."""
    log, bp, candidate = get_run_logger(), run.blueprint, _other(live)
    log.error(f"{bp.name}: the recreate of {candidate} did not promote; restoring {live}")
    mark = time.monotonic()
    tasks.remove(run, candidate)
    phases["remove_candidate"] = round(time.monotonic() - mark, 3)
    restored, up_at = tasks.restore(run, snap)
    phases |= restored
    if down_at is not None:
        phases["downtime"] = round(up_at - down_at, 3)
    log.warning(f"{bp.name}: production back on {live} (revision {snap.revision}): " + _rows(phases))


def _candidate_is_up(run: Run, candidate: str) -> bool:
    run.reload()
    deployed = run.ledger.deployed()
    if deployed is None or deployed.colour != candidate:
        return False
    with Wiring(run.blueprint) as wiring:
        return wiring.routing.presence("v1", "Namespace", deployed.engines_namespace) == "present"


def _rows(phases: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.1f} s" for k, v in phases.items())


def _other(colour: str) -> str:
    return "green" if colour == "blue" else "blue"


@flow(name="recreate")
def recreate_flow(blueprint_path: str, run_id: str | None = None) -> dict:
    """The recreate strategy alone, on the run's current weights (``redeploy --strategy recreate``
    stages the weights first)."""
    return recreate(pipeline.start(blueprint_path, run_id))
