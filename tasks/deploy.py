"""Thin Prefect tasks for stage 5: deploy the candidate colour, prove its KV path, roll it back.

The procedure is ``tasks.stages.deploy``; the cluster is chosen by ``tasks.wiring``'s one rule.
Progress artifacts: pods Ready per role (``<deployment>-deploy-prefill``, ``-decode``, ``-router``)
and in total (``-deploy-total``).
"""

from __future__ import annotations

import dataclasses
import uuid

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from tasks.errors import StackFailure
from tasks.planning.identity import artifact_key
from tasks.planning.records import Deployed, RolledBack
from tasks.progress import StageProgress
from tasks.runs import Run
from tasks.stages import deploy as stage
from tasks.stages.deploy_wait import WaitLimits
from tasks.wiring import Wiring


@task(cache_policy=NO_CACHE)
def choose_colour(run: Run, requested: str | None = None) -> str:
    """The colour the production Service does not select (or ``requested``, if it is not live)."""
    bp = run.blueprint
    with Wiring(bp) as wiring:
        candidate, live = stage.candidate_colour(bp, wiring.kube, requested)
    get_run_logger().info(f"{bp.name}: live colour {live or 'none'}, candidate {candidate}")
    return candidate


@task(cache_policy=NO_CACHE)
def deploy(run: Run, colour: str | None = None, poll_s: float = 5.0, pin: bool = False) -> Deployed:
    """Apply, wait, canary. On failure the diagnostics (events, log tails) become an artifact.
    ``pin``: the engines on this run's own fleet only (a ``fleet`` update's second fleet)."""
    bp, log = run.blueprint, get_run_logger()
    fleet_run = run.run_id if pin else ""
    options = stage.DeployOptions(limits=WaitLimits(poll_s=poll_s), fleet_run=fleet_run)
    ready = StageProgress(bp.name, "deploy", unit="pods Ready")
    with Wiring(bp) as wiring:
        try:
            deployed = stage.deploy(bp, wiring.kube, wiring.engines, colour, options, progress=log.info,
                                    fabric=wiring.efa_counters(run.ledger.fleet()), on_ready=ready)
        except StackFailure as e:
            create_markdown_artifact(markdown=f"# {bp.name}: candidate failed ({e.reason})\n\n```\n"
                                              f"{e.diagnostics}\n```\n", key=artifact_key("deploy-failure", bp.name),
                                     description=f"why the candidate of {bp.name} did not come up")
            raise
        finally:
            ready.flush()  # the last count as it stands (a throttled update may be pending)
        # What is live now, as applied (images pinned by digest), in the state store: what a
        # later run re-applies to put this colour back, from whichever worker.
        key = stage.snapshot_key(bp.name, run.run_id)
        stage.render_to_dir(bp, deployed.colour, wiring.state_root / key, fleet_run)
        stage.save_blueprint(wiring.state_root / key, bp, deployed.colour)
        wiring.state.push(key)
    # A new generation for every deploy: the benchmark and the gate are cached per generation.
    return dataclasses.replace(deployed, generation=uuid.uuid4().hex[:12])


@task(cache_policy=NO_CACHE)
def rollback(run: Run, colour: str, why: str = "", wait_s: float = 0.0) -> RolledBack:
    """Delete the candidate ``colour`` (``tasks.stages.deploy.rollback``); with ``wait_s``, until
    its namespace is gone. Refused for the live colour."""
    bp = run.blueprint
    with Wiring(bp) as wiring:
        done = stage.rollback(bp, wiring.kube, colour, wait_s=wait_s)
    if why:
        get_run_logger().warning(f"{bp.name}: rolled back {colour} ({why}): deleted " + (
            ", ".join(done.deleted) or "nothing (already gone)"))
    return dataclasses.replace(done, why=why)


@task(cache_policy=NO_CACHE)
def publish(deployed: Deployed) -> str:
    rows = "\n".join(f"| {phase} | {seconds:.1f} |" for phase, seconds in deployed.phases_s.items())
    markdown = (f"# {deployed.deployment}: candidate {deployed.colour} is up\n\n"
                f"Live colour: {deployed.live_colour or 'none'}; candidate router: "
                f"`{deployed.router}`; bring-up {deployed.bring_up_s:.1f} s "
                f"(apply to canary passed).\n\n| phase | seconds |\n|---|---|\n{rows}\n\n{deployed.canary}\n")
    create_markdown_artifact(markdown=markdown, key=artifact_key("deploy", deployed.deployment),
                             description=f"candidate {deployed.colour} of {deployed.deployment}")
    return markdown
