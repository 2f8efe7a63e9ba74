"""Thin Prefect tasks of an update of the live colour (``flows.update``): choose the strategy, and
the recreate steps. The choice is ``tasks.planning.strategy``; the steps ``tasks.stages.recreate``.
"""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from tasks.errors import PdliftError
from tasks.planning import fleet_swap, kv_fingerprint, room, strategy, update_plan
from tasks.planning.plan import make_plan
from tasks.planning.identity import artifact_key
from tasks.planning.manifests import common
from tasks.planning.manifests.pods import LWS_API
from tasks.planning.records import RolledBack
from tasks.runs import Run
from tasks.stages import deploy as deploy_stage
from tasks.stages import drain as drain_stage
from tasks.stages import recreate as stage
from tasks.stages.clock import Clock
from tasks.stages.deploy_wait import WaitLimits
from tasks.wiring import Wiring


def _live_objects(wiring: Wiring, bp, live: str) -> list[dict]:
    ns = common.colour_namespace(bp, live)
    return [o for o in (wiring.kube.get(LWS_API, "LeaderWorkerSet", role, ns)
                        for role in (common.PREFILL, common.DECODE)) if o]


@task(cache_policy=NO_CACHE)
def choose_strategy(run: Run, requested: strategy.Strategy = "auto") -> strategy.StrategyChoice:
    """Read what is live (its colour, its engines' KV fingerprint, the GPUs it holds) and pick."""
    bp = run.blueprint
    run.reload()
    with Wiring(bp) as wiring:
        kube = wiring.kube
        live = deploy_stage.live_colour(bp, kube)
        swap = fleet_swap.next_step(run.ledger.handover(), live, fleet_swap.torn_down(run.successor()))
        if swap != "none":
            # A fleet update was cut off: only fleet can finish it (go on building its second
            # fleet, settle which fleet stays, or finish releasing the second); anything else
            # would leave one of them billing.
            what = {"build": "before its switch; this run goes on with its second fleet",
                    "settle": "after its switch; this run settles which fleet stays",
                    "abandon": "while releasing its second fleet; this run finishes that"}[swap]
            return _publish(run, strategy.StrategyChoice("fleet", f"an earlier fleet update was cut off {what}"), [])
        if live is None and stage.in_maintenance(bp, wiring.routing) is not None:
            # A recreate was cut off with production in maintenance: only recreate can finish it.
            choice = strategy.StrategyChoice("recreate", "production is in maintenance: an earlier recreate "
                                                         "was cut off; this run restores or finishes it")
            return _publish(run, choice, [])
        candidate = common.other_colour(live)
        objects = deploy_stage.render(bp, candidate)
        shortfalls, changes = [], []
        if live:
            nodes, pods = kube.fleet_gpus({common.DEPLOYMENT_LABEL: bp.name})
            shortfalls = room.shortfalls(room.needs(objects), nodes, pods, common.colour_namespace(bp, candidate))
            changes = kv_fingerprint.differences(kv_fingerprint.fingerprint(_live_objects(wiring, bp, live)),
                                                 kv_fingerprint.fingerprint(objects))
    choice = strategy.choose(requested, bp.promotion, live=live, room_shortfalls=shortfalls, kv_changes=changes,
                             fleet_obstacle=strategy.second_fleet_obstacle(bp.aws.capacity))
    return _publish(run, choice, changes)


def _publish(run: Run, choice: strategy.StrategyChoice, changes: list[str]) -> strategy.StrategyChoice:
    bp = run.blueprint
    get_run_logger().info(f"{bp.name}: strategy {choice.strategy}: {choice.reason}")
    kv = "\n".join(f"- {c}" for c in changes) or "- none"
    create_markdown_artifact(markdown=f"# {bp.name}: update by {choice.strategy}\n\n{choice.reason}\n\n"
                                      f"KV fingerprint changes (live -> candidate):\n\n{kv}\n",
                             key=artifact_key("strategy", bp.name), description=f"how {bp.name} is updated")
    return choice


@task(cache_policy=NO_CACHE)
def estimate_downtime(run: Run) -> update_plan.Downtime:
    """recreate's downtime as ``pdlift plan`` estimates it, with this fleet's last measured bring-up."""
    bp = run.blueprint
    deployed = run.ledger.deployed()
    timeline = make_plan(bp).timeline
    down = update_plan.recreate_downtime(bp, timeline, deployed.bring_up_s if deployed else None)
    get_run_logger().info(f"{bp.name}: {update_plan.describe(down)} (downtime estimate {down.expected_s:.0f} s)")
    return down


@task(cache_policy=NO_CACHE)
def snapshot(run: Run, live: str, running: bool = True, resuming: str = "") -> stage.Snapshot:
    bp = run.blueprint
    with Wiring(bp) as wiring:
        directory = wiring.state.pull(deploy_stage.snapshot_key(bp.name, run.run_id))
        return stage.read_snapshot(bp, wiring.kube, live, directory, running, resuming)


@task(cache_policy=NO_CACHE)
def prepull(run: Run, live: str) -> float:
    """The candidate's images onto the live colour's nodes, production still serving (seconds)."""
    bp, log, clock = run.blueprint, get_run_logger(), Clock()
    started = clock.monotonic()
    with Wiring(bp) as wiring:
        nodes = stage.prepull(bp, wiring.kube, live, deploy_stage.render(bp, common.other_colour(live)),
                              clock)
    took = round(clock.monotonic() - started, 3)
    log.info(f"{bp.name}: the candidate's images are on {len(nodes)} node(s) ({took:.1f} s): {', '.join(nodes)}")
    return took


@task(cache_policy=NO_CACHE)
def drain(run: Run, snap: stage.Snapshot, retry_after_s: int, generation_before: str) -> tuple[dict[str, float], float]:
    """Production to maintenance, then the live engines' in-flight requests finish. (Seconds per
    phase, when production went down in epoch seconds.)"""
    bp, log, clock, live = run.blueprint, get_run_logger(), Clock(), snap.colour
    with Wiring(bp) as wiring:
        started = clock.monotonic()
        down_at = stage.open_maintenance(bp, wiring.routing, live, retry_after_s, clock,
                                         image=snap.blueprint.engine.image, generation_before=generation_before)
        switched = round(clock.monotonic() - started, 3)
        log.info(f"{bp.name}: production answers 503 (Retry-After {retry_after_s} s) from the maintenance "
                 "responder; waiting for in-flight requests")
        waited, left = drain_stage.wait_in_flight(bp, wiring.kube, wiring.engines, live, clock)
    if left:
        log.warning(f"{bp.name}: {left} request(s) still running on {live} after {waited:.0f} s (the engines' "
                    "--shutdown-timeout); they are cut off")
    return {"maintenance_on": switched, "drain": waited}, down_at


@task(cache_policy=NO_CACHE)
def back_to_maintenance(run: Run, snap: stage.Snapshot, retry_after_s: int) -> None:
    """Production off a candidate that was switched to and then failed, before it is deleted."""
    bp = run.blueprint
    with Wiring(bp) as wiring:
        if deploy_stage.live_colour(bp, wiring.kube) not in (None, snap.colour):
            stage.open_maintenance(bp, wiring.routing, snap.colour, retry_after_s, Clock(),
                                   image=snap.blueprint.engine.image)


@task(cache_policy=NO_CACHE)
def remove(run: Run, colour: str, wait_s: float = 600.0) -> RolledBack:
    bp = run.blueprint
    with Wiring(bp) as wiring:
        done = stage.remove(bp, wiring.kube, colour, wait_s, Clock())
    get_run_logger().info(f"{bp.name}: deleted {colour}: " + (", ".join(done.deleted) or "nothing (already gone)"))
    return done


@task(cache_policy=NO_CACHE)
def restore(run: Run, snap: stage.Snapshot, poll_s: float = 5.0) -> tuple[dict[str, float], float]:
    bp, log = run.blueprint, get_run_logger()
    log.warning(f"{bp.name}: restoring {snap.colour} (revision {snap.revision}) from its snapshot")
    options = deploy_stage.DeployOptions(limits=WaitLimits(poll_s=poll_s))
    with Wiring(bp) as wiring:
        phases, back = stage.restore(snap, wiring.kube, wiring.engines, wiring.routing, options, Clock(),
                               progress=log.info, fabric=wiring.efa_counters(run.ledger.fleet()))
    log.info(f"{bp.name}: production routes to {snap.colour} again (revision {snap.revision})")
    return phases, back


@task(cache_policy=NO_CACHE)
def close_maintenance(run: Run) -> None:
    """Delete the responder once production is back on engines; a failure only warns (production
    is already served), naming the command that finishes it."""
    bp = run.blueprint
    try:
        with Wiring(bp) as wiring:
            stage.close_maintenance(bp, wiring.kube)
    except PdliftError as e:
        get_run_logger().warning(f"{bp.name}: could not delete the maintenance responder ({e}); delete it with: "
                                 f"kubectl -n {common.stable_namespace(bp)} delete deployment maintenance")


@task(cache_policy=NO_CACHE)
def live_colour(run: Run) -> str | None:
    """The colour production's Service selects; None when nothing is live."""
    with Wiring(run.blueprint) as wiring:
        return deploy_stage.live_colour(run.blueprint, wiring.kube)


@task(cache_policy=NO_CACHE)
def generation(run: Run) -> str:
    """The ledger's last recorded deploy (its generation), so a later one can be told apart."""
    run.reload()
    deployed = run.ledger.deployed()
    return deployed.generation if deployed else ""


@task(cache_policy=NO_CACHE)
def candidate_is_up(run: Run, candidate: str, generation_before: str) -> bool:
    """A deploy of ``candidate`` recorded since the recreate began, and its namespace still there."""
    run.reload()
    deployed = run.ledger.deployed()
    if deployed is None or deployed.colour != candidate or deployed.generation == generation_before:
        return False
    with Wiring(run.blueprint) as wiring:
        return wiring.routing.presence("v1", "Namespace", deployed.engines_namespace) == "present"


@task(cache_policy=NO_CACHE)
def in_maintenance(run: Run) -> stage.Maintenance | None:
    """What a cut-off recreate must put back; None when production is not in maintenance."""
    bp = run.blueprint
    with Wiring(bp) as wiring:
        return stage.in_maintenance(bp, wiring.routing)
