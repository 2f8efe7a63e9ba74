"""Stage 6a: benchmark the candidate and judge it against the baseline. The load runner is injected.

For each repeat, scenario and concurrency of the blueprint (repeats outermost, so slow drift
spreads over every point instead of biasing one) one load point runs; its every request is kept.
The points are summarised (repeats pooled, each also on its own) and judged by the pure gate.

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
from dataclasses import asdict, dataclass
from pathlib import Path

from blueprints.schema import Blueprint
from tasks.adapters.ledger_store import write_atomic
from tasks.adapters.loadgen import LoadResult, LoadSpec
from tasks.planning.bench_baseline import (Baseline, baseline_from_spec, dumps_results, loads_baseline,
                                          loads_results)
from tasks.planning.bench_report import render_markdown
from tasks.planning.gate import GateReport, evaluate_gate, expected_points
from tasks.planning.metrics import ScenarioSummary, summarize
from tasks.stages.benchmark_plot import plot_png

RAW_VERSION = 1
Load = Callable[[LoadSpec], LoadResult]
Progress = Callable[[int, int, LoadSpec], None]


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


@dataclass(frozen=True)
class BenchmarkRun:
    target: str
    directory: str
    results_path: str
    notes: tuple[PointNote, ...]


def bench_dir(state_dir: Path, deployment: str, run_id: str) -> Path:
    return Path(state_dir) / "runs" / deployment / run_id / "bench"


def baseline_path(state_dir: Path, deployment: str) -> Path:
    return Path(state_dir) / "baselines" / f"{deployment}.json"


def load_specs(bp: Blueprint, target: str, run_id: str) -> list[LoadSpec]:
    bench = bp.benchmark
    return [LoadSpec(base_url=target.rstrip("/"), scenario=s.name, input_tokens=s.input_tokens,
                     output_tokens=s.output_tokens, concurrency=c, duration_s=s.duration_s,
                     max_requests=s.max_requests, warmup_requests=s.warmup_requests, repeat=r, mode=bench.mode,
                     model=bp.model.name, seed=zlib.crc32(f"{run_id}/{s.name}/{c}/{r}".encode()))
            for r in range(bench.repeats) for s in bench.scenarios for c in s.concurrencies]


def _raw_document(result: LoadResult) -> str:
    client = {"cpu_s": result.client_cpu_s, "cpu_share": result.client_cpu_share,
              "loop_lag_mean_s": result.loop_lag_mean_s, "loop_lag_p99_s": result.loop_lag_p99_s,
              "loop_lag_max_s": result.loop_lag_max_s, "saturated": result.saturated, "saturation": result.saturation}
    return json.dumps({"version": RAW_VERSION, "kind": "pdlift-bench-raw", "spec": asdict(result.spec),
                       "model": result.model, "duration_s": result.duration_s,
                       "warmup_requests": result.warmup_requests, "client": client,
                       "input": {"exact": result.input_lengths_exact, "note": result.input_note,
                                 "usage_missing": result.usage_missing},
                       "records": [asdict(r) for r in result.records]})


def run_benchmark(bp: Blueprint, target: str, directory: Path, run_id: str, load: Load,
                  progress: Progress | None = None) -> BenchmarkRun:
    """Run every load point against ``target`` and write the raw records and the summaries."""
    directory = Path(directory)
    specs = load_specs(bp, target, run_id)
    results: dict[tuple[str, int], list[LoadResult]] = {}
    notes = []
    for i, spec in enumerate(specs):
        if progress:
            progress(i, len(specs), spec)
        result = load(spec)
        raw = directory / "raw" / f"{spec.scenario}-c{spec.concurrency}-r{spec.repeat}.json"
        write_atomic(raw, _raw_document(result))
        results.setdefault((spec.scenario, spec.concurrency), []).append(result)
        notes.append(PointNote(spec.scenario, spec.concurrency, spec.repeat, len(result.records),
                               sum(1 for r in result.records if not r.completed), result.client_cpu_share,
                               result.loop_lag_p99_s * 1000.0, result.saturated, result.saturation,
                               result.input_lengths_exact, result.input_note, result.usage_missing, str(raw)))
    if progress:
        progress(len(specs), len(specs), specs[-1])
    summaries = [_summary(bp, scenario, concurrency, runs) for (scenario, concurrency), runs in results.items()]
    results_path = directory / "results.json"
    write_atomic(results_path, dumps_results(summaries, run_id=run_id, blueprint=bp.name))
    return BenchmarkRun(target, str(directory), str(results_path), tuple(notes))


def _summary(bp: Blueprint, scenario: str, concurrency: int, runs: list[LoadResult]) -> ScenarioSummary:
    records = [r for run in runs for r in run.records]
    durations = {run.spec.repeat: run.duration_s for run in runs}
    return summarize(records, durations, bp.gate.slo, any(run.saturated for run in runs),
                     scenario=scenario, concurrency=concurrency)


def read_results(path: str | Path) -> list[ScenarioSummary]:
    return loads_results(Path(path).read_text())


def current_baseline(state_dir: Path, bp: Blueprint) -> Baseline:
    """The last promoted run's measurements, else the blueprint's published figures."""
    path = baseline_path(state_dir, bp.name)
    if path.exists():
        return loads_baseline(path.read_text())
    return baseline_from_spec(bp.baseline)


def judge(bp: Blueprint, summaries: list[ScenarioSummary], baseline: Baseline, seed: int = 0) -> GateReport:
    return evaluate_gate(summaries, baseline, bp.gate, expected=expected_points(bp.benchmark), seed=seed)


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


def report_markdown(report: GateReport, notes: tuple[PointNote, ...], png: bytes, png_path: Path) -> str:
    """The rationale, the measurement notes, and the plot inline.

    Prefect's image artifact needs a publicly reachable URL, which a worker's disk is not, so
    the PNG is embedded as a data URI (the UI renders it; about 40 KB) and its path is given too.
    """
    data = base64.b64encode(png).decode()
    return "\n".join([render_markdown(report), *_notes_markdown(notes), "## TTFT and TPOT against concurrency",
                      "", f"![TTFT and TPOT against concurrency, candidate vs baseline](data:image/png;base64,{data})",
                      "", f"The same plot on the worker: `{png_path}`", ""])


def write_report(directory: Path, report: GateReport, report_json: dict, summaries: list[ScenarioSummary],
                 baseline: Baseline, notes: tuple[PointNote, ...], title: str) -> tuple[Path, str]:
    """Write gate.json, gate.png and gate.md; returns the PNG path and the markdown."""
    directory = Path(directory)
    png = plot_png(summaries, baseline, title)
    png_path = directory / "gate.png"
    write_atomic(png_path, png)
    write_atomic(directory / "gate.json", json.dumps(report_json, indent=1))
    markdown = report_markdown(report, notes, png, png_path)
    write_atomic(directory / "gate.md", markdown)
    return png_path, markdown
