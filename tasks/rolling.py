"""Thin Prefect tasks of a ``rolling`` update (``flows.update``): the steps are
``tasks.planning.rolling``, their procedures ``tasks.stages.rolling``."""

from __future__ import annotations

import uuid

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from tasks.deploy import fabric_counters
from tasks.planning import rolling as plan
from tasks.planning.manifests.common import colour_namespace, stable_namespace
from tasks.planning.manifests.router import router_name
from tasks.planning.records import Deployed, RoleRolled
from tasks.runs import Run
from tasks.stages import deploy as deploy_stage
from tasks.stages import rolling as stage
from tasks.stages.clock import Clock
from tasks.stages.deploy_wait import WaitLimits, wait_for_stack
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
                               fabric_counters(run, wiring), step)
    get_run_logger().info(f"{bp.name}: canary after {step}: {summary}")
    return summary


@task(cache_policy=NO_CACHE)
def finish(run: Run, colour: str, rolled: list[RoleRolled], canary_summary: str, poll_s: float = 5.0) -> Deployed:
    """The rest of the candidate (its router, Services, accounts: a no-op where unchanged), the
    whole stack waited for, and the deploy record the gate is keyed by. A replay of the same
    update (after a suspension, or a cut-off run) keeps the generation, so the gate reuses its
    measurement; anything else is a new one."""
    bp = run.blueprint
    objects = deploy_stage.render(bp, colour)
    revision = plan.revision_of(plan.role_object(objects, plan.ROLES[0]))
    with Wiring(bp) as wiring:
        deploy_stage.apply_objects(wiring.kube, objects, get_run_logger().debug)
        phases = wait_for_stack(wiring.kube, deploy_stage.pod_groups(bp, colour, objects),
                                lambda pods: deploy_stage.router_gaps(wiring.engines, bp, objects, pods),
                                WaitLimits(poll_s=poll_s), Clock(), get_run_logger().debug)
    run.reload()
    before = run.ledger.deployed()
    generation = before.generation if (before and before.colour == colour
                                       and before.generation.startswith(revision + "-")) \
        else f"{revision}-{uuid.uuid4().hex[:8]}"
    phases |= {f"roll_{r.role}" if r.from_revision != r.to_revision else f"restart_{r.role}": r.seconds
               for r in rolled}
    return Deployed(bp.name, colour, colour, colour_namespace(bp, colour), stable_namespace(bp), router_name(colour),
                    phases, round(sum(r.seconds for r in rolled), 3), canary_summary, generation)


@task(cache_policy=NO_CACHE)
def reverted(run: Run, colour: str, snap: Snapshot, rolled: list[RoleRolled], canary_summary: str) -> Deployed:
    """The deploy record after a full revert: a generation of its own, so a later update of the
    same revision is measured afresh rather than judged by this one's cached verdict."""
    bp = snap.blueprint
    return Deployed(bp.name, colour, colour, colour_namespace(bp, colour), stable_namespace(bp), router_name(colour),
                    {f"revert_{r.role}": r.seconds for r in rolled}, round(sum(r.seconds for r in rolled), 3),
                    canary_summary, f"{snap.revision}-{uuid.uuid4().hex[:8]}")


@task(cache_policy=NO_CACHE)
def save_snapshot(run: Run, colour: str) -> None:
    """After a PASS: the colour's snapshot is what it now runs (what the next update restores)."""
    bp = run.blueprint
    with Wiring(bp) as wiring:
        key = deploy_stage.snapshot_key(bp.name, run.run_id)
        deploy_stage.render_to_dir(bp, colour, wiring.state_root / key)
        deploy_stage.save_blueprint(wiring.state_root / key, bp, colour)
        wiring.state.push(key)
