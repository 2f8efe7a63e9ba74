"""Thin Prefect tasks of a ``rolling`` update (``flows.update``): the steps are
``tasks.planning.rolling``, their procedures ``tasks.stages.rolling``."""

from __future__ import annotations

import uuid

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from tasks.planning import rolling as plan
from tasks.planning.records import Deployed, RoleRolled
from tasks.runs import Run
from tasks.stages import deploy as deploy_stage
from tasks.stages import rolling as stage
from tasks.stages.clock import Clock
from tasks.stages.deploy_wait import WaitLimits
from tasks.stages.recreate import Snapshot
from tasks.wiring import Wiring


def _source(run: Run, colour: str, snap: Snapshot | None):
    """(blueprint, objects) a step applies: the candidate as rendered for the live colour, or
    the snapshot's for a revert."""
    if snap is not None:
        return snap.blueprint, snap.objects
    return run.blueprint, deploy_stage.render(run.blueprint, colour)


@task(cache_policy=NO_CACHE)
def candidate_revision(run: Run, colour: str) -> str:
    return plan.revision_of(plan.role_object(deploy_stage.render(run.blueprint, colour), plan.ROLES[0]))


@task(cache_policy=NO_CACHE)
def roll_role(run: Run, colour: str, role: str, snap: Snapshot | None = None, poll_s: float = 5.0) -> RoleRolled:
    """``role`` of the live ``colour`` onto the candidate (or back onto ``snap``)."""
    log = get_run_logger()
    bp, objects = _source(run, colour, snap)
    with Wiring(run.blueprint) as wiring:
        done = stage.roll(bp, wiring.kube, wiring.engines, colour, objects, role, WaitLimits(poll_s=poll_s),
                          Clock(), log.info)
    what = "reverted" if snap is not None else "rolled"
    log.info(f"{bp.name}: {role} {what} {done.from_revision or 'none'} -> {done.to_revision} in {done.seconds:.1f} s")
    return done


@task(cache_policy=NO_CACHE)
def restart_role(run: Run, colour: str, role: str, snap: Snapshot | None = None, poll_s: float = 5.0) -> RoleRolled:
    log = get_run_logger()
    bp, objects = _source(run, colour, snap)
    log.info(f"{bp.name}: restarting {role}: {plan.decode_restart_reason(bp)}")
    with Wiring(run.blueprint) as wiring:
        done = stage.restart(bp, wiring.kube, wiring.engines, colour, objects, role, WaitLimits(poll_s=poll_s),
                             Clock(), log.info)
    log.info(f"{bp.name}: {role} restarted in {done.seconds:.1f} s")
    return done


@task(cache_policy=NO_CACHE)
def canary(run: Run, colour: str, step: str, snap: Snapshot | None = None) -> str:
    bp, _ = _source(run, colour, snap)
    with Wiring(run.blueprint) as wiring:
        summary = stage.canary(bp, wiring.kube, wiring.engines, colour, deploy_stage.DeployOptions(),
                               wiring.efa_counters(run.ledger.fleet()), step)
    get_run_logger().info(f"{bp.name}: canary after {step}: {summary}")
    return summary


@task(cache_policy=NO_CACHE)
def finish(run: Run, colour: str, rolled: list[RoleRolled], canary_summary: str, poll_s: float = 5.0) -> Deployed:
    """The rest of the candidate applied and the whole stack waited for; the deploy record the
    gate is keyed by (``plan.deployed_after_roll``: a replay of the same update keeps its
    generation)."""
    bp = run.blueprint
    objects = deploy_stage.render(bp, colour)
    with Wiring(bp) as wiring:
        phases = stage.finish(bp, wiring.kube, wiring.engines, colour, objects, WaitLimits(poll_s=poll_s), Clock(),
                              get_run_logger().debug)
    run.reload()
    return plan.deployed_after_roll(bp, colour, plan.revision_of(plan.role_object(objects, plan.ROLES[0])), rolled,
                                    phases, canary_summary, run.ledger.deployed(), uuid.uuid4().hex[:8])


@task(cache_policy=NO_CACHE)
def reverted(run: Run, colour: str, snap: Snapshot, rolled: list[RoleRolled], canary_summary: str) -> Deployed:
    """The deploy record after a full revert (``plan.deployed_after_revert``)."""
    return plan.deployed_after_revert(snap.blueprint, colour, snap.revision, rolled, canary_summary,
                                      uuid.uuid4().hex[:8])


@task(cache_policy=NO_CACHE)
def save_snapshot(run: Run, colour: str) -> None:
    """After a PASS: the colour's snapshot is what it now runs (what the next update restores)."""
    bp = run.blueprint
    with Wiring(bp) as wiring:
        key = deploy_stage.snapshot_key(bp.name, run.run_id)
        deploy_stage.render_to_dir(bp, colour, wiring.state_root / key)
        deploy_stage.save_blueprint(wiring.state_root / key, bp, colour)
        wiring.state.push(key)
