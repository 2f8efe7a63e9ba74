"""Stage 6 flow: benchmark the candidate colour, gate it, then promote, roll back, or ask a person.

    PASS          -> promote (switch the production Service, check traffic, record the baseline),
                     then retire the previous colour after ``promotion.keep_previous_colour_s``
    FAIL          -> roll back (delete the candidate), then fail the run with the gate's reasons
    INCONCLUSIVE  -> the blueprint's ``gate.undecided``:
                     rollback (the default): roll back as a FAIL does, the reasons (with the
                     figures a person would need to decide otherwise) and the report in the error;
                     ask: wait for an ``Approval`` (approve: bool) for ``promotion.approval_timeout_s``;
                     approved -> promote; rejected or no answer in time -> roll back and fail

How the run waits (``undecided: ask`` only): a run of a deployment is *suspended*
(``suspend_flow_run``): its process exits and frees the worker, and on resume the flow runs again
from the top; the benchmark and the gate are cached by (deployment, colour, run id, deploy
generation) with results persisted in the run's state store (``tasks.benchmark``), so the replay,
on whichever worker, reuses the measurement and the verdict the person saw. A run without a
deployment (the CLI, tests under ``prefect_test_harness``) cannot be rescheduled by anyone, so
it *pauses* in-process (``pause_flow_run``) and a timeout rolls back right here.
A suspended run whose timeout passes is failed by Prefect's pause-expiration service ("The flow
was paused and never resumed."), and no code of this flow runs then: its candidate stays up until
the leak sweep (``sweep`` with the blueprint in ``blueprint_paths``, ``tasks.planning.leftovers``),
``pdlift rollback BLUEPRINT COLOUR`` or ``pdlift teardown`` deletes it.
"""

from __future__ import annotations

from typing import Literal

from prefect import flow, get_run_logger
from prefect.context import FlowRunContext
from prefect.exceptions import FlowPauseTimeout
from prefect.flow_runs import pause_flow_run, suspend_flow_run
from prefect.input import RunInput

from flows import pipeline
from tasks import benchmark, deploy, promote
from tasks.errors import BenchmarkBelowGate, StageFailed
from tasks.planning.promotion_decision import (asks_a_person, decide, not_promoted_in_place_message,
                                               paired_default, rolled_back_message)
from tasks.planning.records import GateResult

PAUSE_POLL_S = 2


class Approval(RunInput):
    approve: bool
    note: str = ""


def _ask_a_person(run_id: str, timeout_s: int, reasons: list[str], report: str) -> tuple[bool | None, str]:
    """(approved, why); approved is None when nobody answered in time. Suspends a deployment's
    run, pauses any other (see the module docstring)."""
    why = "\n".join(f"- {r}" for r in reasons[:20])
    form = Approval.with_initial_data(
        description=f"The promotion gate is INCONCLUSIVE:\n\n{why}\n\nReport: `{report}`. Approve to promote "
                    f"the candidate; reject (or no answer within {timeout_s} s) rolls it back.", approve=False)
    context = FlowRunContext.get()
    key = f"gate-approval-{run_id}"
    try:
        if context and context.flow_run and context.flow_run.deployment_id:
            answer = suspend_flow_run(wait_for_input=form, timeout=timeout_s, key=key)
        else:
            answer = pause_flow_run(wait_for_input=form, timeout=timeout_s, poll_interval=PAUSE_POLL_S, key=key)
    except FlowPauseTimeout:
        return None, f"no decision within {timeout_s} s"
    note = f": {answer.note}" if answer.note else ""
    return answer.approve, ("approved" if answer.approve else "rejected") + f" by a person{note}"


@flow(name="benchmark-gate")
def benchmark_flow(blueprint_path: str, run_id: str | None = None, *,
                   colour: Literal["blue", "green"] | None = None, target: str | None = None,
                   in_place: bool = False, same_window: str = "", retire: bool = True,
                   paired: str = "") -> GateResult:
    """Args:
        blueprint_path: the blueprint (benchmark scenarios, baseline, gate, promotion).
        run_id: the run whose candidate to judge (default: derived from the blueprint).
        colour: the candidate colour; default the one the run's deploy stage brought up.
        target: measure this URL instead of the candidate's router.
        in_place: the candidate is the live colour updated in place (a rolling update): a PASS
            records the baseline (production already routes to it), anything else raises
            without deleting it (the update reverts it).
        same_window: judge against the live colour measured in the same window (a ``fleet``
            update's baseline, in the state store at this key), not the last promotion's.
        retire: after a promotion, retire the colour it replaced (keep window, drain, delete);
            False leaves that to the caller (a ``fleet`` update records its switch first).
        paired: measure the candidate at once with this live colour (a ``fleet`` update) under one
            request stream and judge it by the paired gate (``gate.paired``). Without it, a blueprint
            with ``gate.paired`` and ``baseline.endpoint`` is measured beside that endpoint (the
            migration, while the service it replaces still serves).
    """
    run = pipeline.start(blueprint_path, run_id)
    bp, deployed = run.blueprint, run.ledger.deployed()
    colour = colour or (deployed.colour if deployed else None)
    if colour is None:
        raise StageFailed(f"run {run.run_id} has no deployed candidate: run `pdlift deploy` first, or name the colour")
    # The deploy's generation keys the cached measurement and verdict: a replay after a
    # suspension reuses them, the next deploy of the same colour measures afresh.
    generation = deployed.generation if deployed and deployed.colour == colour else ""
    paired = paired or paired_default(bp, in_place, same_window, target)
    measured = benchmark.measure(run, colour, target, generation, same_window, paired=paired)
    verdict = benchmark.judge(run, colour, measured, generation, same_window)
    answer = _ask_a_person(run.run_id, bp.promotion.approval_timeout_s, list(verdict.reasons), verdict.report) \
        if asks_a_person(verdict.outcome, bp.gate.undecided) else (None, "")
    decision = decide(verdict.outcome, bp.gate.undecided, *answer)
    get_run_logger().info(f"{bp.name} {colour}: {decision.text}")
    if decision.promote:
        promoted = promote.promote(run, colour, verdict.results_path)
        retired = promote.retire_previous_colour(run, promoted) if retire else None
        return pipeline.done(run, GateResult("promoted", decision.text, verdict, promoted, retired))
    if in_place:
        raise BenchmarkBelowGate(not_promoted_in_place_message(bp.name, colour, decision, list(verdict.reasons),
                                                               verdict.report))
    # A run still Paused on the server (no answer in time) gets no task runs started: the
    # rollback then runs in this process as a plain function.
    rollback = deploy.rollback.fn if decision.timed_out else deploy.rollback
    rolled_back = rollback(run, colour, decision.text)
    raise BenchmarkBelowGate(rolled_back_message(bp.name, colour, decision, list(rolled_back.deleted),
                                                 list(verdict.reasons), verdict.report))
