"""Stage 6a, paired: the candidate and the live colour (or ``baseline.endpoint``) measured at once
under one request stream, judged per window by the paired gate (``gate.paired``). The load is injected.

Round k (of ``gate.paired.looks``) runs every point for its share of the scenario's
``duration_s``: one paired load point (``loadgen.run_pair``: the same prompts, seed and salt to both
colours, each at the point's concurrency). The round's records are split into windows
(``tasks.planning.paired_windows``); after the round every check is judged at look k
(``tasks.planning.gate_paired_report.verdict``) and a decided gate stops the load: an early FAIL
releases the candidate after a third of the load, not after all of it.

Files, beside the unpaired benchmark's (``tasks.stages.benchmark``)::

    raw/<scenario>-c<C>-r<k>.json            the candidate's requests of round k
    raw/<scenario>-c<C>-r<k>-baseline.json   the baseline colour's requests of the same round
    results.json                             the candidate's summaries; "paired": the windows, the look
    baseline-results.json                    the baseline colour's summaries (the plot's other line)
"""

from __future__ import annotations

import json
import math
import random
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from blueprints.schema import Blueprint
from tasks.adapters.ledger_store import write_atomic
from tasks.adapters.loadgen import LoadResult, LoadSpec
from tasks.errors import ConfigError
from tasks.planning.bench_baseline import Baseline, baseline_from_summaries, dumps_results, loads_results
from tasks.planning.bench_judge import Verdict
from tasks.planning.gate import GateReport, PointStop
from tasks.planning.gate_paired import Levels, LookResult, Point, WindowSums
from tasks.planning.gate_paired_report import PointHealth, verdict, windows_markdown
from tasks.planning.metrics import ScenarioSummary
from tasks.planning.paired_windows import FAMILIES, Span, checks, split
from tasks.planning.server_figures import ServerFigures
from tasks.planning.ttft_probe import Probes
from tasks.stages.benchmark import Around, BenchmarkRun, PointNote, Progress, point_summary, raw_document

LoadPair = Callable[[LoadSpec, LoadSpec], tuple[LoadResult, LoadResult]]


@dataclass(frozen=True)
class PairedState:
    """What the gate reads back from results.json: every point's windows so far and the last look."""

    look: int
    windows: dict[str, dict[Point, tuple[WindowSums, ...]]]
    window_s: dict[Point, float]
    health: dict[Point, PointHealth]
    baseline_source: str

    def to_dict(self) -> dict:
        return {"look": self.look, "baseline_source": self.baseline_source,
                "points": [{"scenario": s, "concurrency": c, "window_s": self.window_s.get((s, c), 0.0),
                            **asdict(self.health[(s, c)]),
                            "windows": {f: [list(asdict(w).values()) for w in self.windows[f].get((s, c), ())]
                                        for f in FAMILIES}}
                           for s, c in sorted(self.health)]}

    @classmethod
    def from_dict(cls, doc: dict) -> "PairedState":
        windows: dict[str, dict[Point, tuple[WindowSums, ...]]] = {f: {} for f in FAMILIES}
        window_s, health = {}, {}
        try:
            for p in doc["points"]:
                point = (str(p["scenario"]), int(p["concurrency"]))
                window_s[point] = float(p["window_s"])
                health[point] = PointHealth(int(p["requests"]), int(p["errors"]), p.get("saturation"),
                                            int(p.get("baseline_requests", 0)), int(p.get("baseline_errors", 0)))
                for f in FAMILIES:
                    windows[f][point] = tuple(WindowSums(float(a), int(b), float(c), int(d))
                                              for a, b, c, d in p["windows"][f])
            return cls(int(doc["look"]), windows, window_s, health, str(doc.get("baseline_source") or ""))
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"the paired results are malformed ({e!r}); run the benchmark again") from e


def read_paired(path: str | Path) -> PairedState | None:
    """A paired benchmark's windows and last look, as it wrote them into results.json; None for
    an unpaired benchmark's results."""
    try:
        doc = json.loads(Path(path).read_text()).get("paired")
    except (TypeError, ValueError, AttributeError) as e:
        raise ConfigError(f"{path}: its paired results are malformed ({e}); run the benchmark again") from e
    return PairedState.from_dict(doc) if doc else None


def levels_of(bp: Blueprint) -> Levels:
    spec = bp.gate.paired
    return Levels.of(1.0 - bp.gate.confidence, spec.looks, spec.spending, len(checks(spec, bp.benchmark)))


def judge(bp: Blueprint, state: PairedState, stops: tuple[PointStop, ...] = (),
          summaries: list[ScenarioSummary] = ()) -> tuple[GateReport, list[str]]:
    """The gate's report at the look the benchmark stopped at, and its windows in words."""
    levels = levels_of(bp)
    outcome, report, result = _verdict(bp, state, levels, stops, summaries)
    return report, windows_markdown(state.windows, result, levels, state.window_s, report.outcome)


def _verdict(bp: Blueprint, state: PairedState, levels: Levels, stops: tuple[PointStop, ...] = (),
             summaries: list[ScenarioSummary] = ()) -> tuple[Verdict | None, GateReport, LookResult]:
    return verdict(checks(bp.gate.paired, bp.benchmark), state.windows, state.health, levels, state.look, bp.gate,
                   stops, state.baseline_source, summaries, Probes.of(bp))


def _specs(bp: Blueprint, candidate: str, baseline: str, run_id: str, scenario, concurrency: int,
           k: int, nonce: int) -> tuple[LoadSpec, LoadSpec]:
    looks = bp.gate.paired.looks
    seed = zlib.crc32(f"{run_id}/{scenario.name}/{concurrency}/{k}/{nonce}".encode())
    ours = LoadSpec(base_url=candidate.rstrip("/"), scenario=scenario.name, input_tokens=scenario.input_tokens,
                    output_tokens=scenario.output_tokens, concurrency=concurrency,
                    duration_s=scenario.duration_s / looks, max_requests=math.ceil(scenario.max_requests / looks),
                    warmup_requests=scenario.warmup_requests, repeat=k, mode=bp.benchmark.mode,
                    model=bp.model.name, seed=seed, salt=seed % 1_000_000)
    # The same stream to the baseline: its model by its own /v1/models (the old service may name it otherwise).
    return ours, replace(ours, base_url=baseline.rstrip("/"), model=None)


def run_paired_benchmark(bp: Blueprint, candidate: str, baseline: str, directory: Path, run_id: str,
                         load_pair: LoadPair, baseline_source: str, progress: Progress | None = None,
                         server: Around | None = None) -> BenchmarkRun:
    """Rounds of every point, both colours at once, until the paired gate decides or its last look;
    ``server``: the candidate's engines, read around each round of a TTFT probe (judged only once
    they show its KV transfers)."""
    if bp.gate.paired is None:
        raise ConfigError(f"{bp.name}: gate.paired is not set; a paired benchmark needs it")
    directory, levels = Path(directory), levels_of(bp)
    points = [(s, c) for s in bp.benchmark.scenarios for c in s.concurrencies]
    looks = bp.gate.paired.looks
    runs: dict[Point, list[tuple[LoadResult, LoadResult]]] = {}
    figures: dict[Point, list[ServerFigures | None]] = {}
    windows: dict[str, dict[Point, tuple[WindowSums, ...]]] = {f: {} for f in FAMILIES}
    window_s: dict[Point, float] = {}
    notes: list[PointNote] = []
    state, outcome, done = None, None, 0
    # New prompts every benchmark (both colours the same ones): a re-run after a redeploy must not
    # meet its earlier prompts in the old service's prefix cache.
    nonce = random.SystemRandom().randrange(1 << 30)
    for k in range(1, looks + 1):
        for scenario, concurrency in points:
            point = (scenario.name, concurrency)
            ours, theirs = _specs(bp, candidate, baseline, run_id, scenario, concurrency, k - 1, nonce)
            if progress:
                progress(done, looks * len(points), ours)
            # A TTFT probe's round with the candidate's engines read around it: its KV transfers.
            (mine, other), figs = (server(lambda: load_pair(ours, theirs)) if server and scenario.ttft_probe
                                   else (load_pair(ours, theirs), None))
            raw = directory / "raw" / f"{scenario.name}-c{concurrency}-r{k - 1}.json"
            write_atomic(raw, raw_document(mine, figs))
            write_atomic(raw.with_name(raw.stem + "-baseline.json"), raw_document(other, None))
            notes.append(PointNote.of(mine, raw))
            cut = split(mine.records, Span.of(mine.records, mine.duration_s), other.records,
                        Span.of(other.records, other.duration_s), bp.gate.paired.window_s)
            for f in FAMILIES:
                windows[f][point] = windows[f].get(point, ()) + cut.windows[f]
            window_s[point] = cut.window_s
            runs.setdefault(point, []).append((mine, other))
            figures.setdefault(point, []).append(figs)
            done += 1
        state = PairedState(k, windows, dict(window_s), _health(runs), baseline_source)
        ours = [_summary(bp, point, [m for m, _ in pair], figures[point]) for point, pair in runs.items()]
        outcome, _, _ = _verdict(bp, state, levels, (), ours)
        if outcome is not None:
            break
    if progress:
        progress(looks * len(points), looks * len(points), None)
    stops = _stops(runs, state, outcome, levels)
    ours = [_summary(bp, point, [m for m, _ in pair], figures[point]) for point, pair in runs.items()]
    theirs = [_summary(bp, point, [o for _, o in pair]) for point, pair in runs.items()]
    results_path = directory / "results.json"
    write_atomic(directory / "baseline-results.json", dumps_results(theirs, run_id=run_id, blueprint=bp.name))
    write_atomic(results_path, dumps_results(ours, run_id=run_id, blueprint=bp.name, extra={
        "stops": [asdict(st) for st in stops], "sequential": None, "paired": state.to_dict()}))
    return BenchmarkRun(candidate, str(directory), str(results_path), tuple(notes), stops)


def _health(runs: dict[Point, list[tuple[LoadResult, LoadResult]]]) -> dict[Point, PointHealth]:
    out = {}
    for point, pairs in runs.items():
        records = [r for mine, _ in pairs for r in mine.records]
        theirs = [r for _, other in pairs for r in other.records]
        saturated = [s for mine, other in pairs for s in (mine.saturation, other.saturation) if s]
        out[point] = PointHealth(len(records), sum(1 for r in records if not r.completed),
                                 saturated[0] if saturated else None, len(theirs),
                                 sum(1 for r in theirs if not r.completed))
    return out


def _stops(runs, state: PairedState, outcome: Verdict | None, levels: Levels) -> tuple[PointStop, ...]:
    k = state.look
    reason = "decided" if outcome in (Verdict.PASS, Verdict.FAIL) else "cap"
    note = {Verdict.PASS: f"every check PASSed at look {k}", Verdict.FAIL: f"a check FAILed at look {k}"}.get(
        outcome, f"undecided at the last look ({k})")
    return tuple(PointStop(s, c, len(pairs), sum(m.duration_s for m, _ in pairs), reason, levels.passing[k - 1],
                           levels.failing[k - 1], note) for (s, c), pairs in runs.items())


def _summary(bp: Blueprint, point: Point, results: list[LoadResult],
             figures: list[ServerFigures | None] | None = None) -> ScenarioSummary:
    return point_summary(bp, point[0], point[1], list(zip(results, figures or [None] * len(results))))


def baseline_of(path: Path, source: str, run_id: str) -> Baseline:
    """The baseline colour's summaries (the report's plot and server table compare against them)."""
    return baseline_from_summaries(loads_results(Path(path).read_text()), source=source, run_id=run_id)
