"""Stage 6a: benchmark the candidate and judge it against the baseline. The load runner is injected.

For each repeat, scenario and concurrency of the blueprint (repeats outermost, so slow drift
spreads over every point instead of biasing one) one load point runs; its every request is kept.
With ``server`` (``tasks.stages.benchmark_server``), the engines' and the GPUs' metrics are read
around each point too. The points are summarised (repeats pooled, each also on its own) and
judged by the pure gate.

Files, under the run's directory ``<state>/runs/<deployment>/<run_id>/bench/``::

    raw/<scenario>-c<C>-r<k>.json   every request of one load point ("pdlift-bench-raw", version 1)
    results.json                    the summaries with their samples: the input of `pdlift gate`
    gate.json, gate.md, gate.png    the report, its rationale and the plot

The baseline is the versioned document ``<state>/baselines/<deployment>.json`` that the last
promotion recorded (``promote.record_baseline``) or, before any promotion, the blueprint's
published figures.
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from blueprints.schema import Blueprint
from tasks.adapters.ledger_store import write_atomic
from tasks.adapters.loadgen import LoadResult, LoadSpec
from tasks.planning.bench_baseline import (Baseline, baseline_from_spec, baseline_from_summaries, dumps_baseline,
                                          dumps_results, loads_baseline, loads_results)
from tasks.planning.bench_report import render_markdown
from tasks.errors import ConfigError
from tasks.planning.gate import GateReport, PointStop, evaluate_gate, expected_points
from tasks.planning.gate_sequential import Round, Schedule, critical_family, looks_of
from tasks.planning.metrics import ScenarioSummary, metric_value, summarize
from tasks.planning.server_figures import UNITS, ServerFigures, pool
from tasks.planning.ttft_probe import Probes
from tasks.stages.benchmark_plot import plot_png

RAW_VERSION = 1
Load = Callable[[LoadSpec], LoadResult]
Progress = Callable[[int, int, LoadSpec | None], None]   # done, at most, the run about to start
# Runs one load point with the server's metrics read around it (benchmark_server.ServerMetrics.around).
Around = Callable[[Callable[[], LoadResult]], tuple[LoadResult, ServerFigures]]


@dataclass(frozen=True)
class PointNote:
    """What one load point says about its own trustworthiness (shown beside the gate)."""

    scenario: str
    concurrency: int
    repeat: int
    requests: int
    errors: int
    client_cpu_share: float
    loop_lag_p99_ms: float
    saturated: bool
    saturation: str | None
    input_exact: bool
    input_note: str
    usage_missing: int
    raw_path: str

    @classmethod
    def of(cls, result: LoadResult, raw: Path) -> "PointNote":
        spec = result.spec
        return cls(spec.scenario, spec.concurrency, spec.repeat, len(result.records),
                   sum(1 for r in result.records if not r.completed), result.client_cpu_share,
                   result.loop_lag_p99_s * 1000.0, result.saturated, result.saturation,
                   result.input_lengths_exact, result.input_note, result.usage_missing, str(raw))


@dataclass(frozen=True)
class BenchmarkRun:
    target: str
    directory: str
    results_path: str
    notes: tuple[PointNote, ...]
    stops: tuple[PointStop, ...] = ()  # how each point ended (sequential), or those the budget cut


def bench_key(deployment: str, run_id: str) -> str:
    """The run's benchmark folder in the state store (raw records, results, the gate's report)."""
    return f"runs/{deployment}/{run_id}/bench"


def baseline_key(deployment: str) -> str:
    """The current baseline in the state store; promoted versions are kept beside it, in a folder
    of the same name."""
    return f"baselines/{deployment}.json"


def same_window_key(deployment: str, run_id: str) -> str:
    """A ``fleet`` update's baseline in the state store: the live colour measured in the same
    window as the candidate on the second fleet (run ``run_id``), ``baseline.json`` inside."""
    return f"runs/{deployment}/{run_id}/bench-baseline"


def write_same_window_baseline(directory: Path, bp: Blueprint, summaries: list[ScenarioSummary], run_id: str,
                               colour: str, created_at: str) -> Path:
    """The live colour's measurement as the baseline a ``fleet`` candidate is judged against."""
    baseline = baseline_from_summaries(summaries, source=f"pdlift run {run_id} ({colour}), live, measured in the "
                                                         "same window as the candidate",
                                       run_id=run_id, created_at=created_at, blueprint=bp.name)
    path = Path(directory) / "baseline.json"
    write_atomic(path, dumps_baseline(baseline))
    return path


def bench_dir(state_dir: Path, deployment: str, run_id: str) -> Path:
    return Path(state_dir) / bench_key(deployment, run_id)


def baseline_path(state_dir: Path, deployment: str) -> Path:
    return Path(state_dir) / baseline_key(deployment)


def _spec(bp: Blueprint, target: str, run_id: str, rnd: Round) -> LoadSpec:
    s, c, r = rnd.scenario, rnd.concurrency, rnd.index
    return LoadSpec(base_url=target.rstrip("/"), scenario=s.name, input_tokens=s.input_tokens,
                    output_tokens=s.output_tokens, concurrency=c, duration_s=rnd.duration_s,
                    max_requests=rnd.max_requests, warmup_requests=rnd.warmup_requests, repeat=r,
                    mode=bp.benchmark.mode, model=bp.model.name, seed=zlib.crc32(f"{run_id}/{s.name}/{c}/{r}".encode()))


def raw_document(result: LoadResult, server: ServerFigures | None) -> str:
    client = {"cpu_s": result.client_cpu_s, "cpu_share": result.client_cpu_share,
              "loop_lag_mean_s": result.loop_lag_mean_s, "loop_lag_p99_s": result.loop_lag_p99_s,
              "loop_lag_max_s": result.loop_lag_max_s, "saturated": result.saturated, "saturation": result.saturation}
    return json.dumps({"version": RAW_VERSION, "kind": "pdlift-bench-raw", "spec": asdict(result.spec),
                       "model": result.model, "duration_s": result.duration_s,
                       "warmup_requests": result.warmup_requests, "client": client,
                       "input": {"exact": result.input_lengths_exact, "note": result.input_note,
                                 "usage_missing": result.usage_missing},
                       "server": None if server is None else {"figures": dict(server.values),
                                                              "notes": list(server.notes)},
                       "records": [asdict(r) for r in result.records]})


def run_benchmark(bp: Blueprint, target: str, directory: Path, run_id: str, load: Load,
                  progress: Progress | None = None, server: Around | None = None,
                  baseline: Baseline | None = None, seed: int = 0) -> BenchmarkRun:
    """Run the blueprint's load against ``target`` and write the raw records and the summaries.

    The ``Schedule`` (``tasks.planning.gate_sequential``) says what to run next: every repeat at
    full length, or, with ``benchmark.sequential``, rounds of each point until the gate can decide
    (judged against ``baseline`` with ``seed``, as the gate will) or ``budget_minutes`` is spent."""
    directory = Path(directory)
    schedule = Schedule(bp.benchmark, bp.gate, baseline, seed, Probes.of(bp))
    most = schedule.rounds * sum(len(s.concurrencies) for s in bp.benchmark.scenarios)
    results: dict[tuple[str, int], list[tuple[LoadResult, ServerFigures | None]]] = {}
    notes, done = [], 0
    while (rnd := schedule.next()) is not None:
        spec = _spec(bp, target, run_id, rnd)
        if progress:
            progress(done, most, spec)
        result, figures = server(lambda: load(spec)) if server else (load(spec), None)
        raw = directory / "raw" / f"{spec.scenario}-c{spec.concurrency}-r{spec.repeat}.json"
        write_atomic(raw, raw_document(result, figures))
        runs = results.setdefault(rnd.point, [])
        runs.append((result, figures))
        notes.append(PointNote.of(result, raw))
        summary = point_summary(bp, spec.scenario, spec.concurrency, runs) if schedule.sequential else None
        schedule.record(rnd, summary, result.duration_s)  # type: ignore[arg-type]
        done += 1
    if progress:
        progress(most, most, None)
    summaries = [point_summary(bp, scenario, concurrency, runs) for (scenario, concurrency), runs in results.items()]
    results_path = directory / "results.json"
    sequential = {"seed": seed, "family": schedule.family} if schedule.sequential else None
    write_atomic(results_path, dumps_results(summaries, run_id=run_id, blueprint=bp.name,
                                             extra={"stops": [asdict(st) for st in schedule.stops],
                                                    "sequential": sequential}))
    return BenchmarkRun(target, str(directory), str(results_path), tuple(notes), schedule.stops)


def point_summary(bp: Blueprint, scenario: str, concurrency: int,
                  runs: list[tuple[LoadResult, ServerFigures | None]]) -> ScenarioSummary:
    records = [r for run, _ in runs for r in run.records]
    durations = {run.spec.repeat: run.duration_s for run, _ in runs}
    summary = summarize(records, durations, bp.gate.slo, any(run.saturated for run, _ in runs),
                        scenario=scenario, concurrency=concurrency)
    measured = {run.spec.repeat: figs for run, figs in runs if figs is not None}
    if not measured:
        return summary

    def with_figures(s: ScenarioSummary, figs: ServerFigures) -> ScenarioSummary:
        return replace(s, server=dict(figs.values), server_notes=figs.notes)

    # summarize() orders the repeats by their index, as the runs were keyed.
    repeats = tuple(with_figures(rep, measured[k]) if k in measured else rep
                    for k, rep in zip(sorted(durations), summary.repeats))
    return replace(with_figures(summary, pool(measured.values())), repeats=repeats)


def read_results(path: str | Path) -> list[ScenarioSummary]:
    return loads_results(Path(path).read_text())


def read_sequential(path: str | Path) -> dict:
    """The seed and the critical family a sequential benchmark judged its looks with ({} if none)."""
    try:
        return dict(json.loads(Path(path).read_text()).get("sequential") or {})
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{path}: its sequential settings are malformed ({e}); run the benchmark again") from e


def read_stops(path: str | Path) -> tuple[PointStop, ...]:
    """How each point ended, as the benchmark wrote it beside its results (none before this version)."""
    try:
        return tuple(PointStop(**st) for st in json.loads(Path(path).read_text()).get("stops") or ())
    except (TypeError, ValueError, AttributeError) as e:
        raise ConfigError(f"{path}: its stops are malformed ({e}); run the benchmark again") from e


def current_baseline(state_dir: Path, bp: Blueprint, same_window: str = "") -> Baseline:
    """The last promoted run's measurements, else the blueprint's published figures; or, with
    ``same_window`` (a ``same_window_key``), the live colour measured beside the candidate."""
    if same_window:
        return loads_baseline((Path(state_dir) / same_window / "baseline.json").read_text())
    path = baseline_path(state_dir, bp.name)
    if path.exists():
        return loads_baseline(path.read_text())
    return baseline_from_spec(bp.baseline)


def judge(bp: Blueprint, summaries: list[ScenarioSummary], baseline: Baseline, seed: int = 0,
          stops: tuple[PointStop, ...] = (), family: int | None = None) -> GateReport:
    """The gate's verdict; a sequential benchmark's points at the level of the look where each stopped;
    a TTFT probe's point on its TTFT, once the engines showed its KV transfers (``tasks.planning.ttft_probe``)."""
    looks = None
    if bp.benchmark.sequential is not None and stops:  # results without stops were measured at full length
        looks = looks_of(stops, family or critical_family(bp.benchmark, bp.gate, baseline))
    return evaluate_gate(summaries, baseline, bp.gate, expected=expected_points(bp.benchmark), seed=seed,
                         looks=looks, stops=stops, probes=Probes.of(bp))


def _notes_markdown(notes: tuple[PointNote, ...]) -> list[str]:
    lines = ["## The measurement itself", "",
             "| scenario | concurrency | repeat | requests | errors | client CPU | loop lag p99 | input length |",
             "|---|---|---|---|---|---|---|---|"]
    for n in notes:
        client = f"{n.client_cpu_share:.0%}" + (" **saturated**" if n.saturated else "")
        length = "exact" if n.input_exact else "**approximate**"
        lines.append(f"| {n.scenario} | {n.concurrency} | {n.repeat} | {n.requests} | {n.errors} | {client} | "
                     f"{n.loop_lag_p99_ms:.1f} ms | {length} |")
    flagged = sorted({n.input_note for n in notes if not n.input_exact} |
                     {n.saturation for n in notes if n.saturation})
    lines += [""] + [f"- {text}" for text in flagged] + ([""] if flagged else [])
    return lines


_SERVER_COLUMNS = (("prefill_queue_ms_mean", "prefill queue"), ("decode_queue_ms_mean", "decode queue"),
                   ("kv_transfer_ms_mean", "KV transfer"), ("kv_transfer_mib_mean", "KV per transfer"),
                   ("spec_acceptance", "spec. acceptance"), ("prefill_gpu_util", "prefill GPU"),
                   ("decode_gpu_util", "decode GPU"))


def _figure(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit == "":
        return f"{value:.1%}"
    return f"{value:.1f} %" if unit == "%" else f"{value:.3g} {unit}"


def server_markdown(summaries: list[ScenarioSummary], baseline: Baseline) -> list[str]:
    """What the engines and the GPUs said per point, beside the baseline's where it has them."""
    if not any(s.server or s.server_notes for s in summaries):
        return []
    lines = ["## What the servers said (candidate; baseline in brackets)", "",
             "| scenario | concurrency | " + " | ".join(title for _, title in _SERVER_COLUMNS) + " |",
             "|---|---|" + "---|" * len(_SERVER_COLUMNS)]
    for s in sorted(summaries, key=lambda s: (s.scenario, s.concurrency)):
        entry = baseline.lookup(s.scenario, s.concurrency)
        cells = []
        for name, _ in _SERVER_COLUMNS:
            cell = _figure(metric_value(s, name), UNITS[name])
            base = entry.figures.get(name) if entry else None
            cells.append(cell + (f" ({_figure(base, UNITS[name])})" if base is not None else ""))
        lines.append(f"| {s.scenario} | {s.concurrency} | " + " | ".join(cells) + " |")
    notes = dict.fromkeys(n for s in summaries for n in s.server_notes)
    lines += [""] + [f"- {n}" for n in notes] + ([""] if notes else [])
    return lines


def server_json(summaries: list[ScenarioSummary]) -> dict:
    """{scenario: {concurrency: {figure: value}}} for gate.json; empty when nothing was read."""
    out: dict[str, dict[str, dict[str, float | None]]] = {}
    for s in summaries if any(s.server or s.server_notes for s in summaries) else ():
        out.setdefault(s.scenario, {})[str(s.concurrency)] = {name: metric_value(s, name) for name, _ in _SERVER_COLUMNS}
    return out


def report_markdown(report: GateReport, notes: tuple[PointNote, ...], png: bytes, png_path: Path,
                    server: list[str] = (), windows: list[str] = ()) -> str:
    """The rationale, the measurement notes, and the plot inline.

    Prefect's image artifact needs a publicly reachable URL, which a worker's disk is not, so
    the PNG is embedded as a data URI (the UI renders it; about 40 KB) and its path is given too.
    """
    data = base64.b64encode(png).decode()
    return "\n".join([render_markdown(report), *windows, *_notes_markdown(notes), *server, "## Against concurrency",
                      "", f"![TTFT, TPOT and what the servers said against concurrency, candidate vs baseline]"
                          f"(data:image/png;base64,{data})",
                      "", f"The same plot on the worker: `{png_path}`", ""])


def write_report(directory: Path, report: GateReport, report_json: dict, summaries: list[ScenarioSummary],
                 baseline: Baseline, notes: tuple[PointNote, ...], title: str,
                 windows: list[str] = ()) -> tuple[Path, str]:
    """Write gate.json, gate.png and gate.md; returns the PNG path and the markdown."""
    directory = Path(directory)
    png = plot_png(summaries, baseline, title)
    png_path = directory / "gate.png"
    write_atomic(png_path, png)
    server = server_json(summaries)
    write_atomic(directory / "gate.json", json.dumps({**report_json, **({"server": server} if server else {})},
                                                     indent=1))
    markdown = report_markdown(report, notes, png, png_path, server_markdown(summaries, baseline), windows)
    write_atomic(directory / "gate.md", markdown)
    return png_path, markdown
