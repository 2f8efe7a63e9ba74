"""Baselines and benchmark results as values, and their JSON documents (pure: text in, text out).

A baseline is what the gate compares a candidate with, per (scenario, concurrency) point:
figures keyed by gate metric name (milliseconds for latencies), and optionally the per-request
samples they came from. It comes from one of two places:

- the blueprint's ``baseline`` section (published figures, means only, sample size unknown):
  ``baseline_from_spec``;
- a previous promoted run, recorded by the promote step: ``baseline_from_summaries`` then
  ``dumps_baseline``. The document is versioned::

    {"version": 1, "kind": "pdlift-baseline", "run_id": ..., "created_at": ..., "blueprint": ...,
     "source": ..., "scenarios": {name: [{"concurrency": c, "completed": n,
                                          "metrics": {metric: value}, "samples": {...}?,
                                          "repeats": {metric: [value per repeat]}?,
                                          "windows": {metric: [mean per window]}?}]},
     "build": the stack revision measured?}

  ``windows``: a mean metric per window of the run (``bench_stats.window_means``, at least 12), so
  a gate against it reads the run's own spread even where its samples are not kept; ``build``:
  what was measured (the engines' revision label), so a later benchmark of the same build is an
  A/A comparison (``tasks.planning.aa_offsets``).

  ITL samples are left out of baselines by default (a chunk gap per token: megabytes per point);
  an ``itl_*`` rule then compares the candidate's bootstrap interval with the baseline figure.

Results (``dumps_results``) are the candidate's ``ScenarioSummary`` list with every sample, so
``pdlift gate RESULTS BASELINE`` can re-run the gate from files.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields

from blueprints.schema import BaselineSpec, Metric
from tasks.errors import ConfigError
from tasks.planning.bench_stats import window_means
from tasks.planning.metrics import Distribution, Samples, ScenarioSummary, metric_value, split_metric

BASELINE_VERSION = 1
RESULTS_VERSION = 1
ALL_METRICS: tuple[str, ...] = typing.get_args(Metric)
# The metrics a recorded run keeps per window: the means of a per-request latency.
WINDOWED = ("ttft_mean", "tpot_mean", "e2e_mean")


@dataclass(frozen=True)
class BaselineEntry:
    scenario: str
    concurrency: int
    figures: Mapping[str, float]
    completed: int | None = None      # requests the figures were measured on (None: unknown)
    samples: Samples | None = None
    repeats: Mapping[str, tuple[float, ...]] = field(default_factory=dict)  # metric -> per-repeat figures
    # Published figures' stated spread (BaselineSpec.cv): a metric family ("ttft", "tpot", "e2e")
    # -> one request's coefficient of variation; "run" -> a run-level figure's between runs.
    cv: Mapping[str, float] = field(default_factory=dict)
    windows: Mapping[str, tuple[float, ...]] = field(default_factory=dict)  # metric -> mean per window
    # metric -> (variance of log ratio, degrees of freedom) that sessions of one build differ by,
    # from the deployment's A/A history (``aa_offsets.with_between``); never stored in the document.
    between: Mapping[str, tuple[float, float | None]] = field(default_factory=dict)


@dataclass(frozen=True)
class Baseline:
    source: str
    entries: tuple[BaselineEntry, ...] = ()
    version: int = BASELINE_VERSION
    run_id: str | None = None
    created_at: str | None = None
    blueprint: str | None = None
    build: str | None = None      # the engines' revision label of what was measured (A/A comparisons)
    _index: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for e in self.entries:
            self._index[(e.scenario, e.concurrency)] = e

    def lookup(self, scenario: str, concurrency: int) -> BaselineEntry | None:
        return self._index.get((scenario, concurrency))

    def covers(self, scenario: str) -> bool:
        """Whether the baseline has a point, at any concurrency, for ``scenario``."""
        return any(s == scenario for s, _ in self._index)


def baseline_from_spec(spec: BaselineSpec) -> Baseline:
    """The blueprint's published figures as a baseline: no samples, but their sample count and
    stated spread, so the gate does not hold them exact."""
    cv = {k: v for k, v in (spec.cv.model_dump() if spec.cv else {}).items() if v is not None}
    entries = []
    for scenario, points in spec.scenarios.items():
        for p in points:
            figures = {"ttft_mean": p.ttft_ms_mean, "tpot_mean": p.tpot_ms_mean, "ttft_p99": p.ttft_ms_p99,
                       "tpot_p99": p.tpot_ms_p99, "output_tokens_per_s": p.output_tokens_per_s}
            own = {k: v for k, v in (p.cv.model_dump() if p.cv else {}).items() if v is not None}
            entries.append(BaselineEntry(scenario, p.concurrency, {k: v for k, v in figures.items() if v is not None},
                                         p.completed, cv={**cv, **own}))
    return Baseline(source=spec.source, entries=tuple(entries))


def baseline_from_summaries(summaries: Iterable[ScenarioSummary], *, source: str, run_id: str | None = None,
                            created_at: str | None = None, blueprint: str | None = None,
                            keep_samples: bool = True, keep_itl_samples: bool = False,
                            build: str | None = None) -> Baseline:
    """A measured run as the next baseline (what promotion records)."""
    entries = []
    for s in summaries:
        figures = {m: v for m in ALL_METRICS if (v := metric_value(s, m)) is not None}
        samples = s.samples if keep_samples else None
        if samples is not None and not keep_itl_samples:
            samples = Samples(ttft=samples.ttft, tpot=samples.tpot, itl=(), e2e=samples.e2e, block=samples.block)
        per_repeat = {m: values for m in figures
                      if len(values := tuple(v for r in s.repeats if (v := metric_value(r, m)) is not None)) > 1}
        windows = {m: w for m in WINDOWED if m in figures and s.samples is not None
                   and (w := window_means(s.samples.of(split_metric(m)[0]), s.samples.block))}  # type: ignore[index]
        entries.append(BaselineEntry(s.scenario, s.concurrency, figures, s.completed, samples, per_repeat,
                                     windows=windows))
    return Baseline(source=source, entries=tuple(entries), run_id=run_id, created_at=created_at,
                    blueprint=blueprint, build=build)


# --- JSON -------------------------------------------------------------------------------------


def _samples_to_dict(samples: Samples | None) -> dict | None:
    if samples is None:
        return None
    data = {k: list(v) for k, v in asdict(samples).items() if k != "block"}
    data["block"] = samples.block
    return data


def _samples_from_dict(data: Mapping | None) -> Samples | None:
    """Samples of a results or baseline document; one written before the block layout existed
    reads as one request per block."""
    if data is None:
        return None
    values = {k: tuple(float(x) for x in data.get(k, ())) for k in ("ttft", "tpot", "itl", "e2e")}
    return Samples(**values, itl_counts=tuple(int(x) for x in data.get("itl_counts", ())),
                   block=int(data.get("block", 1)))


def baseline_to_dict(baseline: Baseline) -> dict:
    scenarios: dict[str, list] = {}
    for e in baseline.entries:
        point = {"concurrency": e.concurrency, "completed": e.completed, "metrics": dict(e.figures)}
        if e.samples is not None:
            point["samples"] = _samples_to_dict(e.samples)
        if e.repeats:
            point["repeats"] = {m: list(v) for m, v in e.repeats.items()}
        if e.cv:
            point["cv"] = dict(e.cv)
        if e.windows:
            point["windows"] = {m: list(v) for m, v in e.windows.items()}
        scenarios.setdefault(e.scenario, []).append(point)
    return {"version": baseline.version, "kind": "pdlift-baseline", "run_id": baseline.run_id,
            "created_at": baseline.created_at, "blueprint": baseline.blueprint,
            "source": baseline.source, "scenarios": scenarios,
            **({"build": baseline.build} if baseline.build else {})}


def _check_version(data: object, kind: str, version: int) -> Mapping:
    if not isinstance(data, Mapping):
        raise ConfigError(f"{kind} document: expected a JSON object, got {type(data).__name__}")
    found = data.get("version")
    if not isinstance(found, int) or not 1 <= found <= version:
        raise ConfigError(f"{kind} document: version {found!r} is not one this pdlift reads (1..{version}); "
                          "hint: re-record it with this version of pdlift")
    return data


def baseline_from_dict(data: object) -> Baseline:
    doc = _check_version(data, "baseline", BASELINE_VERSION)
    try:
        entries = []
        for scenario, points in doc["scenarios"].items():
            for p in points:
                unknown = set(p["metrics"]) - set(ALL_METRICS)
                if unknown:
                    raise ValueError(f"unknown metrics {sorted(unknown)} at {scenario}@{p['concurrency']}")
                entries.append(BaselineEntry(
                    str(scenario), int(p["concurrency"]), {k: float(v) for k, v in p["metrics"].items()},
                    None if p.get("completed") is None else int(p["completed"]),
                    _samples_from_dict(p.get("samples")),
                    {str(m): tuple(float(x) for x in v) for m, v in (p.get("repeats") or {}).items()},
                    {str(k): float(v) for k, v in (p.get("cv") or {}).items()},
                    {str(m): tuple(float(x) for x in v) for m, v in (p.get("windows") or {}).items()}))
        return Baseline(source=str(doc.get("source") or "baseline document"), entries=tuple(entries),
                        version=doc["version"], run_id=doc.get("run_id"), created_at=doc.get("created_at"),
                        blueprint=doc.get("blueprint"), build=doc.get("build"))
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ConfigError(f"baseline document is malformed: {e!r}; hint: it must be written by "
                          "`pdlift` (see tasks/planning/bench_baseline.py for the format)") from e


def summary_to_dict(summary: ScenarioSummary) -> dict:
    data = asdict(summary)
    data["samples"] = _samples_to_dict(summary.samples)
    data["repeats"] = [summary_to_dict(r) for r in summary.repeats]
    return data


def summary_from_dict(data: Mapping) -> ScenarioSummary:
    values = dict(data)
    for name in ("ttft", "tpot", "itl", "e2e", "queue_wait"):
        values[name] = Distribution(**values[name])
    values["samples"] = _samples_from_dict(values.get("samples"))
    values["repeats"] = tuple(summary_from_dict(r) for r in values.get("repeats", ()))
    values["server"] = {str(k): (float(v[0]), float(v[1])) for k, v in (values.get("server") or {}).items()}
    values["server_notes"] = tuple(str(n) for n in values.get("server_notes", ()))
    known = {f.name for f in fields(ScenarioSummary)}
    unknown = set(values) - known
    if unknown:
        raise ValueError(f"unknown summary fields {sorted(unknown)}")
    return ScenarioSummary(**values)


def dumps_baseline(baseline: Baseline) -> str:
    return json.dumps(baseline_to_dict(baseline), allow_nan=False)


def loads_baseline(text: str) -> Baseline:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"baseline document is not JSON: {e}") from e
    return baseline_from_dict(data)


def dumps_results(summaries: Iterable[ScenarioSummary], *, run_id: str | None = None,
                  blueprint: str | None = None, extra: dict | None = None) -> str:
    """The results document; ``extra`` adds keys beside the summaries (the benchmark's stops)."""
    return json.dumps({"version": RESULTS_VERSION, "kind": "pdlift-bench-results", "run_id": run_id,
                       "blueprint": blueprint, "summaries": [summary_to_dict(s) for s in summaries],
                       **(extra or {})}, allow_nan=False)


def loads_results(text: str) -> list[ScenarioSummary]:
    try:
        doc = _check_version(json.loads(text), "results", RESULTS_VERSION)
        return [summary_from_dict(s) for s in doc["summaries"]]
    except json.JSONDecodeError as e:
        raise ConfigError(f"results document is not JSON: {e}") from e
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ConfigError(f"results document is malformed: {e!r}") from e
