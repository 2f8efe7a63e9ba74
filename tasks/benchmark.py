"""Thin Prefect tasks for stage 6: benchmark the candidate and gate it (``tasks.stages.benchmark``).

The benchmark and the gate are cached by (blueprint, candidate colour, run id, deploy
generation) with persisted results: a flow that ``suspend_flow_run`` stopped for a human
decision runs again from the top when it is resumed, and must replay the measurement and the
verdict the person approved, not measure again (hours of GPU time, and possibly a different
verdict). Promotion and rollback are never cached (``tasks.promote``, ``tasks.deploy``).
"""

from __future__ import annotations

import datetime as dt
import zlib
from pathlib import Path

from prefect import get_run_logger, task
from prefect.artifacts import (create_markdown_artifact, create_progress_artifact, create_table_artifact,
                               update_progress_artifact)
from prefect.events import emit_event
from prefect.runtime import flow_run as prefect_flow_run

from tasks.adapters.prefect_results import StateStoreResults
from tasks.errors import ConfigError, PdliftError, StackNotReady
from tasks.planning import aa_offsets, notifications
from tasks.planning.bench_report import report_to_dict, rows_for_table
from tasks.planning.identity import artifact_key
from tasks.planning.ledger import now_str
from tasks.planning.manifests.common import stable_namespace
from tasks.planning.manifests.router import router_name
from tasks.planning.promotion_decision import PAIRED_ENDPOINT
from tasks.planning.records import GateVerdict
from tasks.planning.ttft_probe import Probes
from tasks.runs import Run
from tasks.stages import aa_history
from tasks.stages import benchmark as stage
from tasks.stages import benchmark_paired as paired_stage
from tasks.stages.benchmark_server import ServerMetrics
from tasks.wiring import Wiring


# The persisted results are typed records since v2, and keyed by the deployment (not the
# blueprint's path, which differs between working copies) since v3: a run suspended by an older
# pdlift measures again instead of replaying a result it cannot find or read.
KEY_VERSION = "v3"


def _key(kind: str, parameters: dict) -> str:
    run: Run = parameters["run"]
    generation = parameters.get("generation") or ""
    paired = parameters.get("paired") or ""      # a paired measurement is another measurement
    return (f"pdlift-{KEY_VERSION}-{kind}-{run.blueprint.name}-{parameters['colour']}-{run.run_id}"
            + (f"-{generation}" if generation else "") + (f"-paired-{paired}" if paired else ""))


def measure(run: Run, colour: str, target: str | None, generation: str, same_window: str = "",
            folder: str = "", paired: str = "") -> stage.BenchmarkRun:
    """The benchmark task with its result persisted in the run's state store (see the docstring);
    ``folder``: where its records go instead of the run's benchmark folder (a ``fleet`` update's
    measurement of the live colour, which must not overwrite the live run's own evidence);
    ``paired``: measure the candidate beside this live colour, or beside ``baseline.endpoint``
    with ``PAIRED_ENDPOINT``, under one request stream (``gate.paired``)."""
    return benchmark.with_options(result_storage=_results(run))(run, colour, target, generation, same_window, folder,
                                                                paired)


def judge(run: Run, colour: str, measured: stage.BenchmarkRun, generation: str, same_window: str = "") -> GateVerdict:
    """The gate task with its result persisted in the run's state store; ``same_window``: judged
    against the live colour measured in the same window (``stage.same_window_key``), not the
    last promotion's baseline."""
    return gate.with_options(result_storage=_results(run))(run, colour, measured, generation, same_window)


def _results(run: Run) -> StateStoreResults:
    return StateStoreResults.over(run.store.store, run.blueprint.aws.region)  # the store the run's ledger is in


def _bench_folder(wiring: Wiring, run: Run, folder: str = "") -> Path:
    """The run's benchmark folder on this worker, with what the store holds of it."""
    return wiring.state.pull(folder or stage.bench_key(run.blueprint.name, run.run_id))


def _baseline(wiring: Wiring, bp, same_window: str = "") -> stage.Baseline:
    """What the gate compares with; a recorded one measured in another session carries the
    between-session spread the deployment's A/A history shows (``aa_history``)."""
    wiring.state.pull(same_window or stage.baseline_key(bp.name))
    baseline = stage.current_baseline(wiring.state_root, bp, same_window)
    if same_window or not baseline.build:
        return baseline
    wiring.state.pull(aa_history.aa_key(bp.name))
    return aa_history.with_history(wiring.state_root, baseline)


def _record_aa(wiring: Wiring, run: Run, colour: str, generation: str, summaries: list, baseline: stage.Baseline,
               report, history: list, log) -> None:
    """An unchanged build measured against its own recorded baseline: its offsets join the A/A
    history the next gates read, unless ``aa_offsets.unfit`` says why not."""
    build, unread = aa_history.read_build(wiring.bp, wiring.kube, colour)
    if unread:
        log.warning(f"A/A: could not read which build {colour} runs ({unread}); no A/A offset recorded")
        return
    done, why = aa_history.record_offsets(wiring.state_root, wiring.bp, summaries, baseline, build,
                                          f"{run.run_id}/{generation}", report, seed=zlib.crc32(run.run_id.encode()),
                                          history=history)
    if why:
        log.info(f"A/A: {colour} runs the baseline's own build {build}, but is not recorded as an A/A offset: {why}")
    if done is not None:
        wiring.state.push(aa_history.aa_key(wiring.bp.name))
        log.info(f"A/A: {colour} runs the baseline's own build {build}: its offsets are recorded; "
                 + aa_offsets.describe(aa_offsets.appended(history, done)))


def ready_url(wiring: Wiring, service: str) -> str:
    """The first ready endpoint of ``service`` in the deployment's stable namespace."""
    ns = stable_namespace(wiring.bp)
    ready = [e for e in wiring.routing.endpoints(ns, service) if e.ready]
    if not ready:
        raise StackNotReady(f"no ready endpoint behind Service {ns}/{service}; is it deployed? (or pass --target URL)")
    return ready[0].url


def _promoted_before(wiring: Wiring) -> bool:
    """Whether a promotion recorded this deployment's baseline (the migration's cutover happened)."""
    wiring.state.pull(stage.baseline_key(wiring.bp.name))
    return stage.baseline_path(wiring.state_root, wiring.bp.name).exists()


def _paired_with(wiring: Wiring, paired: str) -> tuple[str, str | None, str]:
    """(URL, API key, what it is) of what a paired benchmark measures beside the candidate."""
    bp = wiring.bp
    if paired != PAIRED_ENDPOINT:
        return ready_url(wiring, router_name(paired)), None, f"the live colour {paired}, measured at once"
    endpoint = bp.baseline.endpoint
    if endpoint is None:
        raise ConfigError(f"{bp.name}: baseline.endpoint is not set; a paired gate against the service being "
                          "replaced needs its URL")
    key = wiring.environ.get(endpoint.api_key_env) if endpoint.api_key_env else None
    if endpoint.api_key_env and not key:
        raise ConfigError(f"baseline.endpoint.api_key_env: the environment variable {endpoint.api_key_env} is not "
                          "set on this worker; set it (or the worker's secret) to the old service's API key")
    return endpoint.url, key, f"the service being replaced ({notifications.scrub_urls(endpoint.url)}), measured at once"


def _paired_benchmark(wiring: Wiring, run: Run, colour: str, url: str, paired: str, directory: Path, progress,
                      log) -> stage.BenchmarkRun:
    other, key, what = _paired_with(wiring, paired)
    log.info(f"paired benchmark: the candidate at {url} beside {what}, one request stream to both")
    # The candidate's engines, for its TTFT probes' KV transfers (none: no probe can be judged).
    server = _server_metrics(wiring, colour, log) if Probes.of(wiring.bp) else None
    measured = paired_stage.run_paired_benchmark(wiring.bp, url, other, directory, run.run_id,
                                                 lambda a, b: wiring.load_pair(a, b, key), what, progress,
                                                 server=server.around if server else None)
    wiring.state.push(stage.bench_key(wiring.bp.name, run.run_id))
    for stop in measured.stops:
        log.info(f"{stop.scenario} @ {stop.concurrency}: {stop.rounds} round(s), {stop.load_s:.0f} s of load; "
                 f"{stop.note}")
    return measured


@task(cache_key_fn=lambda _ctx, p: _key("bench", p), persist_result=True)
def benchmark(run: Run, colour: str, target: str | None = None, generation: str = "",
              same_window: str = "", folder: str = "", paired: str = "") -> stage.BenchmarkRun:
    bp, log = run.blueprint, get_run_logger()
    with Wiring(bp) as wiring:
        url = target or ready_url(wiring, router_name(colour))
        directory, load = _bench_folder(wiring, run, folder), wiring.load
        progress_id = create_progress_artifact(0.0, key=artifact_key("bench", bp.name, "progress"),
                                               description=f"benchmark of {bp.name} ({colour}) against {url}")

        def progress(done: int, total: int, spec) -> None:
            update_progress_artifact(progress_id, 100.0 * done / total)
            if spec is not None:
                kind = "round" if bp.benchmark.sequential or paired else "repeat"
                log.info(f"load run {done + 1} (of at most {total}): {spec.scenario} at concurrency "
                         f"{spec.concurrency}, {kind} {spec.repeat + 1}")

        if paired == PAIRED_ENDPOINT and _promoted_before(wiring):
            # baseline.endpoint is the service the migration replaces; after the first promotion the
            # live colour is this deployment's own, and the gate is against its recorded baseline.
            log.info(f"baseline.endpoint not used: {bp.name} was promoted before, so the service it names was "
                     "replaced; judged against the recorded baseline")
            paired = ""
        if paired:
            return _paired_benchmark(wiring, run, colour, url, paired, directory, progress, log)
        server = _server_metrics(wiring, colour, log)
        # A sequential benchmark judges as it goes, against the baseline the gate will use.
        baseline = _baseline(wiring, bp, same_window) if bp.benchmark.sequential else None
        measured = stage.run_benchmark(bp, url, directory, run.run_id, load, progress=progress,
                                       server=server.around if server else None, baseline=baseline,
                                       seed=zlib.crc32(run.run_id.encode()))
        wiring.state.push(folder or stage.bench_key(bp.name, run.run_id))
    for stop in measured.stops:
        log.info(f"{stop.scenario} @ {stop.concurrency}: {stop.rounds} round(s), {stop.load_s:.0f} s of load; "
                 f"{stop.note}")
    for note in measured.notes:
        if note.saturated or not note.input_exact:
            log.warning(f"{note.scenario} @ {note.concurrency}: {note.saturation or note.input_note}")
    return measured


def _server_metrics(wiring: Wiring, colour: str, log) -> ServerMetrics | None:
    """The candidate's engines and GPUs to read around each point; None when switched off or
    the cluster cannot say where they are (the benchmark itself goes on)."""
    if not wiring.bp.benchmark.server_metrics.enabled:
        return None
    try:
        server = ServerMetrics(wiring.bp, wiring.kube, wiring.engines, colour)
    except PdliftError as e:
        log.warning(f"server-side figures not measured: {e}")
        return None
    for note in server.notes:
        log.warning(f"server-side figures: {note}")
    return server


@task(cache_key_fn=lambda _ctx, p: _key("gate", p), persist_result=True)
def gate(run: Run, colour: str, measured: stage.BenchmarkRun, generation: str = "",
         same_window: str = "") -> GateVerdict:
    """Judge, write the report files, publish the artifacts and emit ``pdlift.gate.<outcome>``."""
    bp = run.blueprint
    with Wiring(bp) as wiring:
        # This worker may not be the one that measured: the folder comes from the store.
        directory = _bench_folder(wiring, run)
        results_path = directory / "results.json"
        summaries = stage.read_results(results_path)
        paired = paired_stage.read_paired(results_path)
        if paired is not None:
            baseline = paired_stage.baseline_of(directory / "baseline-results.json", paired.baseline_source,
                                                run.run_id)
            report, windows = paired_stage.judge(bp, paired, measured.stops, summaries)
        else:
            baseline, windows = _baseline(wiring, bp, same_window), []
            family = stage.read_sequential(results_path).get("family")
            report = stage.judge(bp, summaries, baseline, seed=zlib.crc32(run.run_id.encode()), stops=measured.stops,
                                 family=family)
            if not same_window and baseline.build:
                history = aa_history.read_history(wiring.state_root, bp.name)   # pulled by _baseline
                get_run_logger().info(f"judged against the recorded baseline of run {baseline.run_id}: "
                                      + aa_offsets.describe(history))
                _record_aa(wiring, run, colour, generation, summaries, baseline, report, history, get_run_logger())
        # When, by which flow run and of which colour: `pdlift status` shows the latest verdict and
        # links to its run; the leak sweep knows which candidate a verdict was about.
        report_json = {**report_to_dict(report), "judged_at": now_str(dt.datetime.now(dt.timezone.utc)),
                       "flow_run_id": str(prefect_flow_run.id or ""), "colour": colour}
        png, markdown = stage.write_report(directory, report, report_json, summaries, baseline,
                                           measured.notes, f"{bp.name} {colour} (run {run.run_id})", windows)
        wiring.state.push(stage.bench_key(bp.name, run.run_id))
    create_markdown_artifact(markdown=markdown, key=artifact_key("gate", bp.name),
                             description=f"promotion gate of {bp.name} {colour}: {report.outcome.value}")
    for scenario in report.scenarios:
        create_table_artifact(rows_for_table(report, scenario), key=artifact_key("gate", bp.name, scenario),
                              description=f"{scenario}: candidate vs baseline")
    # For automations (deploy/automations.yaml); an INCONCLUSIVE one is the run about to roll the
    # candidate back (gate.undecided: rollback) or to wait for a person's approval (ask), for at
    # most approval_timeout_s (flows.benchmark).
    emit_event(**notifications.gate_event(bp.name, report.outcome.value, {
        **report_json, "run_id": run.run_id, "colour": colour, "undecided": bp.gate.undecided,
        "approval_timeout_s": bp.promotion.approval_timeout_s}))
    get_run_logger().info(f"gate {report.outcome.value}: " + "; ".join(report.reasons[:5]))
    return GateVerdict(report.outcome.value, tuple(report.reasons), str(png),
                       str(directory / "gate.json"), str(results_path))
