"""Thin Prefect tasks for stage 6: benchmark the candidate, gate it, promote it or roll it back.

The benchmark and the gate are cached by (blueprint, candidate colour, run id) with persisted
results: a flow that ``suspend_flow_run`` stopped for a human decision runs again from the top
when it is resumed, and must replay the measurement and the verdict the person approved, not
measure again (hours of GPU time, and possibly a different verdict). Promotion and rollback are
never cached: they run once, after the decision.
"""

from __future__ import annotations

import hashlib
import zlib
from dataclasses import asdict
from pathlib import Path

from prefect import get_run_logger, task
from prefect.artifacts import (create_markdown_artifact, create_progress_artifact, create_table_artifact,
                               update_progress_artifact)
from prefect.cache_policies import NO_CACHE
from prefect.events import emit_event

from blueprints.loader import load_blueprint
from tasks.adapters.engine_http import EngineHttp
from tasks.adapters.ledger_store import state_dir
from tasks.adapters.promotion import ServiceRouting
from tasks.deploy import kube_api_client
from tasks.errors import PdliftError, StackNotReady
from tasks.planning.identity import artifact_key
from tasks.planning.bench_report import report_to_dict, rows_for_table
from tasks.planning.manifests.common import stable_namespace
from tasks.planning.manifests.router import router_name
from tasks.stages import benchmark as bench
from tasks.stages import promote as promotion


def _key(kind: str, parameters: dict) -> str:
    where = hashlib.sha256(str(Path(parameters["blueprint_path"]).resolve()).encode()).hexdigest()[:12]
    generation = parameters.get("generation") or ""
    return f"pdlift-{kind}-{where}-{parameters['colour']}-{parameters['run_id']}" + (f"-{generation}" if generation
                                                                                  else "")


def ready_url(bp, service: str) -> str:
    """The first ready endpoint of ``service`` in the deployment's stable namespace."""
    with kube_api_client(bp) as api:
        ready = [e for e in ServiceRouting(api).endpoints(stable_namespace(bp), service) if e.ready]
    if not ready:
        raise StackNotReady(f"no ready endpoint behind Service {stable_namespace(bp)}/{service}; "
                            "is it deployed? (or pass --target URL)")
    return ready[0].url


def candidate_url(bp, colour: str) -> str:
    """The candidate's router, through its Service's endpoints."""
    return ready_url(bp, router_name(colour))


@task(cache_key_fn=lambda _ctx, p: _key("bench", p), persist_result=True)
def benchmark_candidate(blueprint_path: str, colour: str, run_id: str, target: str | None = None,
                        generation: str = "") -> dict:
    bp, log = load_blueprint(blueprint_path), get_run_logger()
    url = target or candidate_url(bp, colour)
    progress_id = create_progress_artifact(0.0, key=artifact_key("bench", bp.name, "progress"),
                                           description=f"benchmark of {bp.name} ({colour}) against {url}")

    def progress(done: int, total: int, spec) -> None:
        update_progress_artifact(progress_id, 100.0 * done / total)
        if done < total:
            log.info(f"load point {done + 1}/{total}: {spec.scenario} at concurrency {spec.concurrency}, "
                     f"repeat {spec.repeat}")

    run = bench.run_benchmark(bp, url, bench.bench_dir(state_dir(), bp.name, run_id), run_id, progress=progress)
    for note in run.notes:
        if note.saturated or not note.input_exact:
            log.warning(f"{note.scenario} @ {note.concurrency}: {note.saturation or note.input_note}")
    return asdict(run)


@task(cache_key_fn=lambda _ctx, p: _key("gate", p), persist_result=True)
def gate(blueprint_path: str, colour: str, run_id: str, benchmark: dict, generation: str = "") -> dict:
    """Judge, write the report files, publish the artifacts and emit ``pdlift.gate.<outcome>``."""
    bp = load_blueprint(blueprint_path)
    summaries = bench.read_results(benchmark["results_path"])
    baseline = bench.current_baseline(state_dir(), bp)
    report = bench.judge(bp, summaries, baseline, seed=zlib.crc32(run_id.encode()))
    report_json = report_to_dict(report)
    notes = tuple(bench.PointNote(**n) for n in benchmark["notes"])
    png, markdown = bench.write_report(Path(benchmark["directory"]), report, report_json, summaries, baseline,
                                       notes, f"{bp.name} {colour} (run {run_id})")
    create_markdown_artifact(markdown=markdown, key=artifact_key("gate", bp.name),
                             description=f"promotion gate of {bp.name} {colour}: {report.outcome.value}")
    for scenario in report.scenarios:
        create_table_artifact(rows_for_table(report, scenario), key=artifact_key("gate", bp.name, scenario),
                              description=f"{scenario}: candidate vs baseline")
    emit_event(f"pdlift.gate.{report.outcome.value.lower()}",
               resource={"prefect.resource.id": f"pdlift.deployment.{bp.name}", "prefect.resource.name": bp.name},
               payload={**report_json, "run_id": run_id, "colour": colour})
    get_run_logger().info(f"gate {report.outcome.value}: " + "; ".join(report.reasons[:5]))
    return {"outcome": report.outcome.value, "reasons": list(report.reasons), "plot": str(png),
            "report": str(Path(benchmark["directory"]) / "gate.json"), "results_path": benchmark["results_path"]}


@task(cache_policy=NO_CACHE)
def promote_candidate(blueprint_path: str, colour: str, run_id: str, results_path: str) -> dict:
    bp = load_blueprint(blueprint_path)
    with kube_api_client(bp) as api, EngineHttp() as http:
        done = promotion.promote(bp, colour, ServiceRouting(api), http)
    baseline = promotion.record_baseline(state_dir(), bp, bench.read_results(results_path), run_id, colour)
    get_run_logger().info(f"{bp.name}: production now routes to {colour} (was {done.previous or 'none'}); "
                          f"{len(done.answered)} endpoint(s) answered; baseline {baseline}")
    return {"colour": done.colour, "previous": done.previous, "answered": list(done.answered),
            "baseline": str(baseline)}


@task(cache_policy=NO_CACHE)
def rollback_candidate(blueprint_path: str, colour: str, why: str) -> dict:
    bp = load_blueprint(blueprint_path)
    with kube_api_client(bp) as api:
        done = promotion.rollback(bp, colour, ServiceRouting(api))
    get_run_logger().warning(f"{bp.name}: rolled back {colour} ({why}): deleted " + (", ".join(done.deleted) or
                                                                                    "nothing (already gone)"))
    return {"colour": done.colour, "deleted": list(done.deleted), "why": why}


@task(cache_policy=NO_CACHE)
def retire_previous_colour(blueprint_path: str, promoted: dict) -> dict | None:
    """After a promotion: the colour it replaced is deleted once the blueprint's keep window ends."""
    bp = load_blueprint(blueprint_path)
    log = get_run_logger()
    if promoted.get("previous") and bp.promotion.keep_previous_colour_s:
        log.info(f"{bp.name}: keeping {promoted['previous']} for {bp.promotion.keep_previous_colour_s} s "
                 f"(promotion.keep_previous_colour_s) before deleting it")
    try:
        with kube_api_client(bp) as api:
            done = promotion.retire_previous(bp, promoted.get("previous"), promoted["colour"], ServiceRouting(api))
    except PdliftError as e:
        # Production already routes to the new colour: a failed clean-up must not fail that.
        log.warning(f"{bp.name}: could not retire the previous colour {promoted.get('previous')}: {e}; delete it "
                    f"with: pdlift rollback {blueprint_path} {promoted.get('previous')}")
        return {"colour": promoted.get("previous"), "kept_s": 0, "deleted": [], "skipped": f"failed: {e}"}
    if done is None:
        return None
    log.info(f"{bp.name}: previous colour {done.colour} " + (done.skipped or "retired: deleted " + (
        ", ".join(done.deleted) or "nothing (already gone)")))
    return {"colour": done.colour, "kept_s": done.kept_s, "deleted": list(done.deleted), "skipped": done.skipped}
