"""Thin Prefect tasks after the gate: promote the candidate, then retire the colour it replaced.

The procedures are ``tasks.stages.promote``.

A rollback is the deploy stage's (``tasks.deploy.rollback``): one rollback serves the gate, the
retire and the CLI.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from tasks.errors import PdliftError
from tasks.planning.records import Promotion, Retired
from tasks.runs import Run
from tasks.stages import aa_history
from tasks.stages import benchmark as bench
from tasks.stages import promote as stage
from tasks.wiring import Wiring


@task(cache_policy=NO_CACHE)
def promote(run: Run, colour: str, results_path: str) -> Promotion:
    bp = run.blueprint
    with Wiring(bp) as wiring:
        done = stage.promote(bp, colour, wiring.routing, wiring.engines)
        # The measurement may have been made by another worker: read it from the store.
        measured = wiring.state.pull(bench.bench_key(bp.name, run.run_id)) / Path(results_path).name
        build, unread = aa_history.read_build(bp, wiring.kube, colour)
        if unread:   # production already routes to the colour: the baseline is still recorded
            get_run_logger().warning(f"{bp.name}: could not read which build {colour} runs ({unread}); its baseline "
                                     "is recorded without it, so the next redeploy is no A/A comparison")
        baseline = stage.record_baseline(wiring.state_root, bp, bench.read_results(measured), run.run_id, colour,
                                         build=build)
        wiring.state.push(bench.baseline_key(bp.name))
        wiring.state.push(bench.baseline_key(bp.name).removesuffix(".json"))
    get_run_logger().info(f"{bp.name}: production now routes to {colour} (was {done.previous or 'none'}); "
                          f"{len(done.answered)} endpoint(s) answered; baseline {baseline}")
    return dataclasses.replace(done, baseline=str(baseline))


@task(cache_policy=NO_CACHE)
def retire_previous_colour(run: Run, promoted: Promotion) -> Retired | None:
    """After a promotion: the colour it replaced is deleted once the blueprint's keep window ends."""
    bp, log = run.blueprint, get_run_logger()
    if promoted.previous and bp.promotion.keep_previous_colour_s:
        log.info(f"{bp.name}: keeping {promoted.previous} for {bp.promotion.keep_previous_colour_s} s "
                 f"(promotion.keep_previous_colour_s) before deleting it")
    try:
        with Wiring(bp) as wiring:
            done = stage.retire_previous(bp, promoted.previous, promoted.colour, wiring.routing,
                                         http=wiring.engines)
    except PdliftError as e:
        # Production already routes to the new colour: a failed clean-up must not fail that.
        log.warning(f"{bp.name}: could not retire the previous colour {promoted.previous}: {e}; delete it "
                    f"with: pdlift rollback {run.blueprint_path} {promoted.previous}")
        return Retired(promoted.previous or "", 0, (), f"failed: {e}")
    if done is None:
        return None
    log.info(f"{bp.name}: previous colour {done.colour} " + (done.skipped or "retired: deleted " + (
        ", ".join(done.deleted) or "nothing (already gone)")))
    return done
