"""How far two sessions of one build differ: what a gate against a recorded baseline cannot see
within one run. Pure.

A recorded baseline was measured in another session than the candidate (another day, other
neighbours on the fabric, thermals, a fresh engine's caches), so their figures differ by more than
either run's own noise even when nothing changed; a gate that held the sessions equal would PASS a
candidate at its margin more often than its level says (``../shared/reference/gate-decides.md``
section 4: with a between-session drift of 0.02 in log the affordable pooled margin moves from
5.3% to 6.5%). Nothing measured within one session shows that drift; a scheduled redeploy of an
unchanged build does, for free: an A/A comparison, whose offset to the baseline is the drift of
the two sessions plus their runs' own noise.

Each comparison keeps, per metric (a mean of a per-request latency) and point, the offset
d = log(candidate / baseline) and its within-session variance v (the gate's own standard error,
squared). The between-session variance of a log ratio is their method-of-moments estimate
(DerSimonian and Laird 1986, "Meta-analysis in clinical trials", with equal weights)::

    s_b^2 = max(0, mean over comparisons of the mean over points of (d^2 - v))

whose degrees of freedom are Satterthwaite's for a difference of means of squares: each
comparison's d^2 scatters as (s_b^2 + v) chi^2_1, so var(s_b^2) ~ 2 (s_b^2 + v)^2 / k and the
estimate carries k s_b^4 / (s_b^2 + v)^2 degrees of freedom (at least 1), fewer than the k
comparisons when their own noise is a large part of what they show (counting the points of one
comparison as one: they share its two sessions). The gate adds s_b^2 to a recorded baseline's
variance (``bench_stats.bootstrap_ratio``'s ``between``), for a family's percentiles as for its
mean (a session's drift scales the whole distribution). The history is the last ``HISTORY``
comparisons; a gate judged again for the same deploy replaces its own entry.

What is not a comparison (``unfit``), because one bad entry would widen every gate for a
quarter: an unchanged build whose gate FAILed (a fault the gate caught, a bad node or link, not
the drift between healthy sessions), a measurement the gate could not trust (errors over the
ceiling, too few samples, a saturated client, a probe without its transfers, a missing point),
and an offset as large as the gate's tightest latency margin in either direction (a session that
far off, faster or slower, is a fault on one side, not drift). "The same build" is the engines'
revision label and the benchmark's points (``workload``): an A/A offset of other prompts is none.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from blueprints.schema import Blueprint
from tasks.errors import ConfigError
from tasks.planning.bench_baseline import WINDOWED, Baseline
from tasks.planning.bench_judge import Verdict
from tasks.planning.bench_stats import Blocks, bootstrap_ratio
from tasks.planning.gate import GateReport, candidate_spread, recorded_spread
from tasks.planning.metrics import ScenarioSummary, split_metric

# The rows that say whether a measurement can be trusted at all (``gate._point_checks``).
_HEALTH = ("errors", "samples", "client", "transfer", "results")

AA_VERSION = 1
# Comparisons kept: a year of weekly redeploys would describe a fabric and a driver stack that
# have changed since; a quarter's does not.
HISTORY = 12


@dataclass(frozen=True)
class Comparison:
    """One A/A comparison: an unchanged build measured against its own recorded baseline."""

    key: str                  # the run and its deploy generation (redeploys reuse the fleet's run id)
    created_at: str
    build: str
    baseline_run_id: str
    offsets: Mapping[str, Mapping[str, tuple[float, float]]]  # metric -> "scenario@c" -> (d, v)


def workload(bp: Blueprint) -> str:
    """A short hash of what the benchmark measures (its points, prompt and completion lengths,
    mode): an offset between two benchmarks of other prompts is no A/A offset."""
    points = [[s.name, s.input_tokens, s.output_tokens, s.concurrencies, s.ttft_probe] for s in bp.benchmark.scenarios]
    return hashlib.sha256(json.dumps([points, bp.benchmark.mode]).encode()).hexdigest()[:8]


def tightest_margin(bp: Blueprint) -> float | None:
    """The log of the gate's tightest gated latency rule (an A/A offset that large is a fault)."""
    ratios = [r.max_ratio for r in bp.gate.rules if r.max_ratio is not None and not r.report_only
              and (split_metric(r.metric) or ("",))[0] in ("ttft", "tpot", "itl", "e2e")]
    return math.log(min(ratios)) if ratios else None


def is_aa(baseline: Baseline, build: str) -> bool:
    """Whether measuring ``build`` against ``baseline`` is an A/A comparison: a recorded baseline
    (promotion records one after its gate, so never from the measurement being judged) of the
    same build."""
    return bool(build) and baseline.build == build


def _point(scenario: str, concurrency: int) -> str:
    return f"{scenario}@{concurrency}"


def unfit(report: GateReport, offsets: Mapping[str, Mapping[str, tuple[float, float]]],
          limit: float | None) -> str:
    """Why an unchanged build's measurement is no A/A comparison ('' when it is one): its gate
    FAILed, a health check did not PASS, or an offset reached ``limit`` (the log of the gate's
    tightest latency margin) either way."""
    if report.outcome is Verdict.FAIL:
        return "its gate FAILed: a fault the gate caught, not drift between sessions"
    sick = next((r for r in report.rows if r.check in _HEALTH and r.verdict is not Verdict.PASS), None)
    if sick is not None:
        return f"its measurement was not trusted at {sick.scenario} @ {sick.concurrency} ({sick.check}: {sick.reason})"
    if limit is not None:
        for metric, points in offsets.items():
            for point, (d, _) in points.items():
                if abs(d) >= limit:
                    return (f"{metric} at {point} is {math.exp(d):.3f}x its baseline, as far as the gate's tightest "
                            f"margin ({math.exp(limit):.3f}x): a fault on one side, not drift")
    return ""


def offsets_of(summaries: Iterable[ScenarioSummary], baseline: Baseline, seed: int = 0,
               resamples: int = 1000, skip: Iterable[str] = ()) -> dict[str, dict[str, tuple[float, float]]]:
    """Per metric and point, log(candidate / baseline) and its within-session variance, read as
    the gate reads them (time blocks, each side's repeats or windows) without any between-session
    term; ``skip``: scenarios left out (TTFT probes: their 2-token TPOT is no one's)."""
    out: dict[str, dict[str, tuple[float, float]]] = {}
    skipped = set(skip)
    for s in summaries:
        entry = baseline.lookup(s.scenario, s.concurrency)
        if entry is None or entry.samples is None or s.samples is None or s.scenario in skipped:
            continue
        for metric in WINDOWED:
            family = split_metric(metric)[0]  # type: ignore[index]
            cand, base = s.samples.of(family), entry.samples.of(family)
            if not cand or not base:
                continue
            test = bootstrap_ratio(Blocks.of(cand, s.samples.block), Blocks.of(base, entry.samples.block), "mean",
                                   seed, resamples, candidate_repeats=candidate_spread(s, metric),
                                   baseline_repeats=recorded_spread(entry, metric))
            if test is not None and test.ratio > 0:
                out.setdefault(metric, {})[_point(s.scenario, s.concurrency)] = (math.log(test.ratio),
                                                                                test.se_log ** 2)
    return out


def appended(history: Sequence[Comparison], comparison: Comparison, keep: int = HISTORY) -> list[Comparison]:
    """The history with ``comparison`` last (replacing an earlier one of the same deploy), the
    newest ``keep`` kept."""
    others = [c for c in history if c.key != comparison.key]
    return (others[-(keep - 1):] if keep > 1 else []) + [comparison]


def between(history: Sequence[Comparison], metric: str) -> tuple[float, float] | None:
    """(s_b^2, degrees of freedom) for ``metric`` over the comparisons that measured it; None
    without any."""
    squares, noise = [], []
    for c in history:
        points = c.offsets.get(metric) or {}
        if points:
            squares.append(math.fsum(d * d for d, _ in points.values()) / len(points))
            noise.append(math.fsum(v for _, v in points.values()) / len(points))
    if not squares:
        return None
    k = len(squares)
    var = max(0.0, (math.fsum(squares) - math.fsum(noise)) / k)
    shown = var + math.fsum(noise) / k
    return var, max(1.0, k * var * var / (shown * shown)) if shown > 0 else float(k)


def with_between(baseline: Baseline, history: Sequence[Comparison]) -> Baseline:
    """A recorded baseline with the between-session variance of each metric the history knows."""
    figures = {m: b for m in WINDOWED if (b := between(history, m)) is not None}
    if not figures:
        return baseline
    entries = tuple(replace(e, between={m: b for m, b in figures.items() if m in e.figures}) for e in baseline.entries)
    return replace(baseline, entries=entries)


def describe(history: Sequence[Comparison]) -> str:
    """One line for a log or a report: how much between-session spread the history shows."""
    parts = [f"{m} {math.sqrt(b[0]):.3g} in log ({b[1]:.3g} df)" for m in WINDOWED
             if (b := between(history, m)) is not None]
    if not parts:
        return "no A/A comparison recorded yet: the gate holds two sessions of one build equal"
    return f"{len(history)} A/A comparison(s): between sessions " + ", ".join(parts)


# --- JSON -------------------------------------------------------------------------------------


def dumps_history(history: Sequence[Comparison]) -> str:
    return json.dumps({"version": AA_VERSION, "kind": "pdlift-aa-offsets", "comparisons": [
        {"key": c.key, "created_at": c.created_at, "build": c.build, "baseline_run_id": c.baseline_run_id,
         "offsets": {m: {p: list(dv) for p, dv in points.items()} for m, points in c.offsets.items()}}
        for c in history]}, allow_nan=False)


def loads_history(text: str, where: str) -> list[Comparison]:
    """The history document at ``where``; a malformed one is named with the fix."""
    try:
        doc = json.loads(text)
        if not isinstance(doc, Mapping) or doc.get("kind") != "pdlift-aa-offsets":
            raise ValueError("not a pdlift A/A history (kind pdlift-aa-offsets)")
        if doc.get("version") != AA_VERSION:
            raise ValueError(f"version {doc.get('version')!r}, this pdlift reads {AA_VERSION}")
        return [Comparison(str(c["key"]), str(c["created_at"]), str(c["build"]), str(c["baseline_run_id"]),
                           {str(m): {str(p): (float(dv[0]), float(dv[1])) for p, dv in points.items()}
                            for m, points in c["offsets"].items()})
                for c in doc["comparisons"]]
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as e:
        raise ConfigError(f"{where}: the A/A history is malformed ({e}); delete it to start a new one (the next "
                          "redeploy of an unchanged build records one again)") from e
