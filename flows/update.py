"""An update of the live colour on the fleet a run holds (``redeploy`` and ``rollout``): choose the
strategy (``tasks.planning.strategy``), then run it.

    blue-green  weights, deploy beside the live colour, benchmark, gate: ``migrate``'s stages
    recreate    weights; snapshot the live colour; pull the candidate's images onto its nodes;
                drain (production answers 503 + Retry-After);
                delete the live engines; deploy the candidate on the same nodes; benchmark and
                gate against the same-fleet baseline (the last promotion's); PASS: production
                on the candidate. A FAIL, an INCONCLUSIVE that is not approved (at once with
                gate.undecided: rollback) or any error: the candidate deleted, the snapshot
                re-applied and canaried, production back on the previous version.

    rolling     weights; snapshot the live colour; decode, then prefill, replaced in place on the
                nodes they hold (``tasks.planning.rolling``), each followed by the P->D canary; the
                benchmark and the gate of the live colour against the last promotion's baseline;
                PASS: the baseline and the snapshot are the new version's. A role that fails to
                come up or fails its canary is reverted alone (the other keeps what it runs: the
                two are KV-compatible, or rolling is refused); a FAIL or an error after both
                reverts both.

    fleet       a second fleet under a run id linked to the live one (``<run>-f1``), through the
                pipeline's own stages: reserve, launch, fabric, weights, then the candidate
                deployed on it (pinned to its nodes); the live colour benchmarked as the
                baseline, then the candidate, in the same window; the gate; PASS: production
                switched, the old colour kept for ``keep_previous_colour_s`` and drained, then the
                first fleet released by its tags (reservation included). No second fleet to be
                had, a FAIL or any error before the switch: the candidate and everything of the
                second fleet released, the live colour untouched.

A recreate cut off mid-way (a killed worker) leaves production in maintenance; a re-run of the
same run id finds it so and restores the snapshot before it updates again, so production is
never left without an engine once a run ends. A rolling update cut off mid-way goes on at the
role it stopped at (a role already on the candidate's revision is only waited for). A fleet
update cut off mid-way is found by the ``handover`` record in the live run's ledger: before the
switch, the next run goes on with the same second fleet (its own ledger resumes its stages);
after it, the next run releases the first fleet. Once released, an update of the old run id
goes to the run that holds the fleet now.
"""

from __future__ import annotations

import dataclasses
import time

from prefect import flow, get_run_logger
from prefect.exceptions import Pause

from flows import pipeline
from flows.benchmark import benchmark_flow
from flows.deploy import deploy_flow
from flows.migrate import REDEPLOY_STAGES, STAGE_FLOWS, MigrateParams, migrate
from tasks import benchmark as benchmark_tasks
from tasks import fleet as fleet_tasks
from tasks import pipeline as pipeline_tasks
from tasks import promote as promote_tasks
from tasks import rolling as rolling_tasks
from tasks import update as tasks
from tasks.errors import StageFailed
from tasks.planning import rolling as rolling_plan
from tasks.planning.records import Promotion
from tasks.planning.strategy import Strategy
from tasks.stages.benchmark import same_window_key
from tasks.planning.manifests.common import colour_namespace as common_ns, other_colour
from tasks.runs import Run


def update(blueprint_path: str, run_id: str | None, strategy: Strategy = "auto") -> dict:
    run = pipeline.start(blueprint_path, fleet_tasks.holder(blueprint_path, run_id))
    choice = tasks.choose_strategy(run, strategy)
    if choice.strategy == "blue-green":
        result = migrate(MigrateParams(blueprint=blueprint_path, run_id=run.run_id, stages=REDEPLOY_STAGES,
                                       rerun=REDEPLOY_STAGES))
        return {**result, "strategy": "blue-green", "strategy_reason": choice.reason}
    if choice.strategy == "recreate":
        pipeline.run_stages(run, ["weights"], ["weights"], STAGE_FLOWS)
        return {**recreate(run), "strategy": "recreate", "strategy_reason": choice.reason}
    if choice.strategy == "rolling":
        pipeline.run_stages(run, ["weights"], ["weights"], STAGE_FLOWS)
        return {**rolling(run), "strategy": "rolling", "strategy_reason": choice.reason}
    if choice.strategy == "fleet":
        return {**fleet(run), "strategy": "fleet", "strategy_reason": choice.reason}
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
    """Benchmark and gate the candidate. An INCONCLUSIVE verdict is restored from at once like a
    FAIL, or with gate.undecided: ask waits for a person like any gate (production stays in
    maintenance meanwhile: the plan's worst case counts the wait)."""
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


def rolling(run: Run) -> dict:
    """The rolling sequence; returns its outcome with each step's seconds (a role's engines are
    out of the P->D path while it restarts)."""
    log, bp = get_run_logger(), run.blueprint
    live = tasks.live_colour(run)
    if live is None:
        raise StageFailed(f"{bp.name}: nothing is live to update; run `pdlift deploy` (or migrate) first")
    target = rolling_tasks.candidate_revision(run, live)
    # Refused before anything is touched unless the live roles run the snapshot's revision (or,
    # after a cut-off rolling update of this same change, the candidate's).
    snap = tasks.snapshot(run, live, resuming=target)
    rolled, summary = [], ""
    for step in rolling_plan.steps(bp):
        try:
            act = rolling_tasks.roll_role if step.action == "roll" else rolling_tasks.restart_role
            rolled.append(act(run, live, step.role))
            summary = rolling_tasks.canary(run, live, f"{step.action} {step.role}")
        except Exception:
            _revert(run, snap, [step.role])  # only the role in flight
            raise
    try:
        pipeline.done(run, rolling_tasks.finish(run, live, rolled, summary), keep_lease=True)
        gate = benchmark_flow(run.blueprint_path, run.run_id, colour=live, in_place=True)
    except Exception:
        _revert(run, snap, [rolling_plan.PREFILL, rolling_plan.DECODE])
        raise
    rolling_tasks.save_snapshot(run, live)
    pipeline_tasks.release_run(run)
    phases = {f"{r.role}_{'restart' if r.from_revision == r.to_revision else 'roll'}": r.seconds for r in rolled}
    log.info(f"{bp.name}: {live} runs revision {target} (was {snap.revision}): " + _rows(phases))
    return {"deployment": bp.name, "previous": live, "colour": live, "outcome": gate.outcome, "revision": target,
            "previous_revision": snap.revision, "phases_s": phases}


def _revert(run: Run, snap, roles: list[str]) -> None:
    """``roles`` of the live colour back onto the snapshot, in that order, and decode restarted
    after a prefill revert where the engine needs it; then the canary. A revert that fails is
    logged with what runs, and the original error is the one raised."""
    log, bp, live = get_run_logger(), run.blueprint, snap.colour
    log.error(f"{bp.name}: the rolling update of {live} did not promote; reverting {', '.join(roles)} to revision "
              f"{snap.revision}")
    done = []
    try:
        for step in rolling_plan.revert_steps(snap.blueprint, roles):
            act = rolling_tasks.roll_role if step.action == "roll" else rolling_tasks.restart_role
            done.append(act(run, live, step.role, snap))
        summary = rolling_tasks.canary(run, live, "the revert", snap)
        if set(roles) == set(rolling_plan.ROLES):
            pipeline.done(run, rolling_tasks.reverted(run, live, snap, done, summary), keep_lease=True)
    except Exception as e:  # noqa: BLE001 - the update's own error is the one the run reports
        log.critical(f"{bp.name}: the revert of {', '.join(roles)} failed ({e}); {live} may run a mix of revisions: "
                     f"inspect with `kubectl -n {common_ns(bp, live)} get lws -L pdlift.io/revision`")
        return
    log.warning(f"{bp.name}: {', '.join(roles)} back on revision {snap.revision}")


SECOND_FLEET_STAGES = ["reserve", "launch", "fabric", "weights"]


def fleet(run: Run) -> dict:
    """The fleet sequence; returns its outcome, the second fleet's run id, each phase's seconds
    and the extra fleet-hours (both fleets billing) from the two ledgers."""
    log, bp = get_run_logger(), run.blueprint
    handover, step, live = fleet_tasks.where(run)
    phases: dict[str, float] = {}
    if step == "abandon":  # cut off while giving its second fleet up: finish that first
        _abandon(run, pipeline.start(run.blueprint_path, handover.successor), handover)
        handover, step = dataclasses.replace(handover, phase="abandoned"), "none"
    if step in ("none", "build"):
        if live is None:
            raise StageFailed(f"{bp.name}: nothing is live to update; run `pdlift deploy` (or migrate) first")
        fleet_tasks.check_owner(run, live)
        handover = pipeline.done(run, fleet_tasks.begin(run, live, handover), keep_lease=True)
        second = pipeline.start(run.blueprint_path, handover.successor)
        try:
            phases |= _build_and_switch(run, second, handover, live)
            log.info(f"{bp.name}: production switched to {handover.colour} on the second fleet: " + _rows(phases))
        except BaseException as e:  # a cancellation too: the second fleet must not be left billing
            if isinstance(e, Pause):  # Prefect suspending or rescheduling the run: it comes back
                raise
            if tasks.live_colour(run) == handover.colour:
                log.error(f"{bp.name}: {type(e).__name__} after production switched to {handover.colour}: {e}")
                if not isinstance(e, Exception):  # cancelled: the switch is recorded, the next run settles
                    pipeline.done(run, dataclasses.replace(handover, phase="switched"), keep_lease=True)
                    raise
            else:
                _give_up(run, second, handover, f"{type(e).__name__}: {e}", e,
                         f"the fleet update stopped before its switch ({e}); {live} is untouched")
        handover = pipeline.done(run, dataclasses.replace(handover, phase="switched"), keep_lease=True)
    else:
        log.warning(f"{bp.name}: an earlier fleet update switched production to {handover.colour} (run "
                    f"{handover.successor}) and was cut off; settling which fleet stays")
        second = pipeline.start(run.blueprint_path, handover.successor)
    # Which fleet goes is decided by what production routes to: before the old colour is retired,
    # and again after its keep window (a person may switch back meanwhile).
    mark = time.monotonic()
    for check in ("switch", "keep window"):
        action = fleet_tasks.settle(run, handover)
        if action == "stop":
            raise StageFailed(f"{bp.name}: after the {check}, production routes to neither colour of the fleet update "
                              f"that answers; both fleets are kept (runs {run.run_id} and {handover.successor})")
        if action == "abandon":
            why = f"production was switched back to {handover.previous_colour} (seen after the {check})"
            _give_up(run, second, handover, why, None, why)
        if handover.phase != "switched":  # switched just before a crash could record it
            handover = pipeline.done(run, dataclasses.replace(handover, phase="switched"), keep_lease=True)
        if check == "switch":
            promote_tasks.retire_previous_colour(second, Promotion(handover.colour, handover.previous_colour, ()))
    phases["keep_and_retire"] = round(time.monotonic() - mark, 3)
    fleet_tasks.verify_production(run, handover.colour)  # raises, releasing nothing, if it does not answer
    mark = time.monotonic()
    handover = pipeline.done(run, fleet_tasks.release(run, handover), keep_lease=True)
    phases["release_first_fleet"] = round(time.monotonic() - mark, 3)
    extra = fleet_tasks.overlap(run, second, phases)
    pipeline_tasks.publish_ledgers([run, second])
    pipeline_tasks.release_run(second)
    pipeline_tasks.release_run(run)
    log.info(f"{bp.name}: production on {handover.colour} on run {second.run_id}'s fleet; run {run.run_id}'s fleet "
             f"released; both billed for {extra.hours:.2f} h (${extra.usd:,.2f} extra): " + _rows(phases))
    return {"deployment": bp.name, "previous": handover.previous_colour, "colour": handover.colour,
            "outcome": "promoted", "fleet_run_id": second.run_id, "previous_fleet_run_id": run.run_id,
            "phases_s": phases, "extra_fleet_hours": extra.hours, "extra_usd": extra.usd,
            "released": handover.note}


def _build_and_switch(run: Run, second: Run, handover, live: str) -> dict[str, float]:
    """The second fleet through the pipeline's stages, the candidate on it, the same-window
    benchmark and the gate; a PASS switches production (the old colour is retired later)."""
    phases, mark = {}, time.monotonic()
    # weights again: a resumed swap may carry another model revision than the one staged
    pipeline.run_stages(second, SECOND_FLEET_STAGES, ["weights"], STAGE_FLOWS)
    phases["second_fleet"] = round(time.monotonic() - mark, 3)
    mark = time.monotonic()
    deployed = deploy_flow(second.blueprint_path, second.run_id, colour=handover.colour, pin_to_fleet=True)
    phases["bring_up"] = round(time.monotonic() - mark, 3)
    mark = time.monotonic()
    if run.blueprint.gate.paired is not None:
        # Both colours under one request stream at once: half the load time, and drift cancels.
        benchmark_flow(second.blueprint_path, second.run_id, colour=handover.colour, paired=live, retire=False)
        phases["paired_benchmark_and_switch"] = round(time.monotonic() - mark, 3)
        return phases
    folder = same_window_key(run.blueprint.name, second.run_id)
    measured = benchmark_tasks.measure(second, live, None, f"same-window-{deployed.generation}", folder=folder)
    baseline = fleet_tasks.same_window_baseline(run, second, live, measured)
    phases["baseline"] = round(time.monotonic() - mark, 3)
    mark = time.monotonic()
    benchmark_flow(second.blueprint_path, second.run_id, colour=handover.colour, same_window=baseline, retire=False)
    phases["benchmark_and_switch"] = round(time.monotonic() - mark, 3)
    return phases


def _abandon(run: Run, second: Run, handover) -> None:
    """The second fleet released, the handover marked abandoned, both ledgers published."""
    pipeline.done(run, fleet_tasks.abandon(run, second, handover), keep_lease=True)
    pipeline_tasks.publish_ledgers([run, second])


def _give_up(run: Run, second: Run, handover, why: str, cause: BaseException | None, what: str) -> None:
    """Record the abandon before its cleanup (a cut-off cleanup is finished by the next run),
    release the second fleet, and raise saying what happened, the cleanup's own failure too."""
    bp = run.blueprint
    try:
        _abandon(run, second, pipeline.done(run, dataclasses.replace(handover, phase="abandoning", note=why),
                                            keep_lease=True))
    except Exception as cleanup:
        raise StageFailed(f"{bp.name}: {what}; releasing the second fleet (run {second.run_id}) failed too "
                          f"({cleanup}): the next run of this update finishes it, or `pdlift teardown "
                          f"{run.blueprint_path} --run-id {second.run_id}`") from (cause or cleanup)
    raise StageFailed(f"{bp.name}: {what}; the second fleet (run {second.run_id}) was released") from cause


@flow(name="recreate")
def recreate_flow(blueprint_path: str, run_id: str | None = None) -> dict:
    """The recreate strategy alone, on the run's current weights (``redeploy --strategy recreate``
    stages the weights first)."""
    return recreate(pipeline.start(blueprint_path, run_id))


@flow(name="rolling")
def rolling_flow(blueprint_path: str, run_id: str | None = None) -> dict:
    """The rolling strategy alone, on the run's current weights (``redeploy --strategy rolling``
    stages the weights first, and refuses a change that is not KV-compatible)."""
    return rolling(pipeline.start(blueprint_path, run_id))
