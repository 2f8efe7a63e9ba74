"""Thin Prefect tasks of a ``fleet`` update (``flows.update``): the books are
``tasks.planning.fleet_swap``, the release and the abandon ``tasks.stages.fleet_swap``; the second
fleet itself goes through the pipeline's own stage flows."""

from __future__ import annotations

import dataclasses
import datetime as dt

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from blueprints.loader import load_blueprint
from tasks.errors import PdliftError
from tasks.planning import fleet_swap as books
from tasks.planning.identity import artifact_key, check_run_id
from tasks.planning.ledger import now_str
from tasks.planning.manifests.common import other_colour
from tasks.planning.records import Handover
from tasks.runs import Run, run_id_of
from tasks.stages import benchmark as bench
from tasks.stages import deploy as deploy_stage
from tasks.stages import fleet_swap as stage
from tasks.stages import promote as promote_stage
from tasks.wiring import Wiring


@task(cache_policy=NO_CACHE)
def holder(blueprint_path: str, run_id: str | None) -> str:
    """The run that holds the fleet now: ``run_id``'s, or the run its fleet updates handed it to."""
    bp = load_blueprint(blueprint_path)
    store = Wiring(bp).ledgers

    def handover_of(rid: str) -> Handover | None:
        ledger = store.load(bp.name, rid)
        return ledger.handover() if ledger else None

    found = books.current_run_id(run_id_of(bp, run_id), handover_of)
    if found != run_id_of(bp, run_id):
        get_run_logger().info(f"{bp.name}: run {run_id_of(bp, run_id)}'s fleet was handed over; the fleet is "
                              f"run {found}'s now")
    return found


@task(cache_policy=NO_CACHE)
def where(run: Run) -> tuple[Handover | None, books.Step, str | None]:
    """An earlier fleet update of this run's fleet, what this run does about it first, and the
    colour production routes to. A second fleet someone tore down by hand before its switch
    counts as abandoned."""
    run.reload()
    handover = run.ledger.handover()
    bp = run.blueprint
    with Wiring(bp) as wiring:
        production = deploy_stage.live_colour(bp, wiring.kube)
    step = books.next_step(handover, production, books.torn_down(run.successor()))
    if handover is not None and step == "none" and handover.phase == "building":
        get_run_logger().warning(f"{bp.name}: the second fleet of an earlier fleet update, run {handover.successor}, "
                                 "was torn down before its switch; a new one is built")
        handover = dataclasses.replace(handover, phase="abandoned", note="torn down before its switch")
    return handover, step, production


@task(cache_policy=NO_CACHE)
def check_owner(run: Run, live: str) -> None:
    """Refused, nothing touched, unless the live colour runs on this run's fleet."""
    with Wiring(run.blueprint) as wiring:
        stage.check_owner(run.blueprint, wiring.kube, live, run.run_id)


@task(cache_policy=NO_CACHE)
def begin(run: Run, live: str, earlier: Handover | None) -> Handover:
    """The swap to record before the second fleet's first request: the same second fleet when an
    earlier attempt was cut off while building it, else a new one."""
    if earlier is not None and earlier.phase == "building":
        get_run_logger().warning(f"{run.blueprint.name}: an earlier fleet update of run {run.run_id} was cut off "
                                 f"before its switch; going on with its second fleet, run {earlier.successor}")
        return earlier
    successor = books.successor_run_id(earlier.successor if earlier is not None else run.run_id)
    check_run_id(successor)  # before the handover is recorded: a fleet whose run id cannot label its nodes is refused
    get_run_logger().info(f"{run.blueprint.name}: a second fleet, run {successor}, for {other_colour(live)}; "
                          f"{live} stays live on run {run.run_id}'s fleet until the switch")
    return Handover(successor, other_colour(live), live, "building")


@task(cache_policy=NO_CACHE)
def same_window_baseline(run: Run, second: Run, live: str, measured: bench.BenchmarkRun) -> str:
    """The live colour's measurement (in the second run's ``same_window_key`` folder) as the
    baseline the candidate is judged against; that key."""
    bp = run.blueprint
    key = bench.same_window_key(bp.name, second.run_id)
    with Wiring(bp) as wiring:
        folder = wiring.state.pull(key)
        summaries = bench.read_results(folder / "results.json")
        bench.write_same_window_baseline(wiring.state_root / key, bp, summaries, run.run_id, live,
                                         now_str(dt.datetime.now(dt.timezone.utc)))
        wiring.state.push(key)
    get_run_logger().info(f"{bp.name}: the live {live} measured in the same window ({measured.target}); the "
                          "candidate is judged against it")
    return key


@task(cache_policy=NO_CACHE)
def settle(run: Run, handover: Handover) -> books.Settle:
    """After the switch: which fleet goes, by what production routes to now (and, when that is the
    previous colour again, whether its routers still answer)."""
    bp, log = run.blueprint, get_run_logger()
    with Wiring(bp) as wiring:
        production = deploy_stage.live_colour(bp, wiring.kube)
        answers = True
        if production == handover.previous_colour:
            try:
                promote_stage.check_traffic(bp, production, wiring.routing, wiring.engines, timeout_s=30.0)
            except PdliftError as e:
                answers = False
                log.critical(f"{bp.name}: production routes to {production} again, but it does not answer ({e})")
    action = books.settle_action(handover, production, answers)
    if action == "stop":
        log.critical(f"{bp.name}: production routes to {production or 'nothing'} and the fleet update cannot tell "
                     f"which fleet to release; both are kept: {handover.colour} on run {handover.successor}, "
                     f"{handover.previous_colour} on run {run.run_id}. Point production at one that answers, then run "
                     "the update again")
    return action


@task(cache_policy=NO_CACHE)
def verify_production(run: Run, colour: str) -> None:
    """Production routes only to ``colour``'s routers and each answers, before a fleet goes."""
    bp = run.blueprint
    with Wiring(bp) as wiring:
        promote_stage.check_traffic(bp, colour, wiring.routing, wiring.engines, timeout_s=60.0)


@task(cache_policy=NO_CACHE)
def release(run: Run, handover: Handover) -> Handover:
    """``run``'s fleet, released by its tags, its ledger's resources ended; the handover done."""
    bp, log = run.blueprint, get_run_logger()
    log.info(f"{bp.name}: releasing run {run.run_id}'s fleet (production is on {handover.colour}, run "
             f"{handover.successor})")
    with Wiring(bp) as wiring:
        report = stage.release(bp, wiring.capacity, wiring.instances, wiring.kube, run.run_id)
    _end_released(run, report)
    for line in report.lines():
        log.info(f"{bp.name}: {line}")
    return dataclasses.replace(handover, phase="released", note="; ".join(report.lines()) or "nothing to release")


@task(cache_policy=NO_CACHE)
def abandon(run: Run, second: Run, handover: Handover) -> Handover:
    """The second fleet given up (``handover.note`` says why): its candidate and everything
    tagged with its run released."""
    bp, log = run.blueprint, get_run_logger()
    log.error(f"{bp.name}: the fleet update did not complete ({handover.note}); releasing the second fleet, run "
              f"{second.run_id}; {handover.previous_colour} stays live")
    with Wiring(bp) as wiring:
        report = stage.abandon(bp, wiring.kube, wiring.capacity, wiring.instances, second.run_id, handover.colour)
    _end_released(second, report)
    for line in report.kept:
        log.warning(f"{bp.name}: {line}")
    released = "; ".join(f"{f.kind} {f.resource_id}" for f in report.released) or "nothing had been made"
    log.warning(f"{bp.name}: second fleet released: {released}")
    return dataclasses.replace(handover, phase="abandoned", note=f"{handover.note} (released: {released})")


def _end_released(run: Run, report) -> None:
    """End what the release freed in ``run``'s ledger, and whatever else it still lists as
    billing: the release found nothing else tagged with the run, so an entry still open is one an
    earlier, cut-off release freed before it could say so."""
    for found in report.released:
        run.ended(found.kind, found.resource_id)
    run.reload()
    for entry in run.ledger.live():
        if entry.kind != "capacity-block":  # a block bills to its end whatever is released
            run.ended(entry.kind, entry.resource_id)


@task(cache_policy=NO_CACHE)
def overlap(run: Run, second: Run, phases: dict[str, float]) -> books.Overlap:
    """How long and at what cost both fleets billed (from the two ledgers, as they stand now),
    published beside the two cost ledgers."""
    run.reload()
    second.reload()
    now = dt.datetime.now(dt.timezone.utc)
    extra = books.overlap(run.ledger, second.ledger, now)
    bp = run.blueprint
    rows = "\n".join(f"| {name} | {seconds:.1f} |" for name, seconds in phases.items())
    create_markdown_artifact(
        markdown=f"# {bp.name}: fleet update\n\nProduction moved from run {run.run_id}'s fleet to run "
                 f"{second.run_id}'s. Both fleets billed for **{extra.hours:.3f} h**, **${extra.usd:,.2f}** "
                 f"extra (the first fleet's cost after the second began to bill).\n\n| phase | seconds |\n|---|---|\n"
                 f"{rows}\n\nThe cost ledgers of both runs: artifacts `cost-ledger-{bp.name}`.\n",
        key=artifact_key("fleet-update", bp.name), description=f"{bp.name}: extra fleet-hours of the update")
    return extra
