"""The promotion gate: candidate benchmark summaries vs a baseline -> PASS, FAIL or INCONCLUSIVE.

Kayenta-style statistics in-process (docs/sources.md#gate-statistics). The rules,
per (scenario, concurrency) point, in the order they apply:

1. Error ceiling. error rate > ``gate.max_error_rate`` is FAIL (critical), whatever else holds:
   the issue's "5% request errors: FAIL". Errors are facts, not noise, so no statistics here.
2. Trust in the measurement. Fewer completed requests than ``gate.min_samples``, or a saturated
   client (the latencies would measure the load generator), make every check of the point
   INCONCLUSIVE ("not judged"); such a point can never PASS or FAIL on its metrics.
3. SLO checks (critical), for each of ``gate.slo``'s ttft_ms/tpot_ms/e2e_ms that is set: the
   candidate's *mean* must stay at or under it (means are what the published figures use;
   per-request SLOs are what goodput counts).
4. Ratio checks, for each ``GateRule`` with max_ratio (latencies: candidate/baseline <= r) or
   min_ratio (throughputs: candidate/baseline >= r). They need the baseline: a scenario the
   baseline has no point for at all is INCONCLUSIVE; a concurrency the baseline skips in a
   scenario it does cover is not compared (the blueprint's published figures name one
   concurrency per scenario), only rules 1-3 hold there; a baseline point that lacks the figure,
   or was measured on fewer than min_samples requests, is INCONCLUSIVE.

Each SLO or ratio check is decided from the pooled point estimate x and the bound L:
- x within L: PASS.
- x beyond L and the violation significant at ``gate.confidence``: FAIL. Significance is
  tested against the bound itself, not against "no change" (Kayenta's allowedIncrease):
  * per-request metrics at mean/p50 with baseline samples: one-sided Mann-Whitney U of
    candidate / L against the baseline samples, p < 1 - confidence;
  * p90/p99, a baseline with figures only, and SLOs: the two-sided bootstrap interval of the
    ratio (or of the mean, for SLOs) lies wholly beyond L;
  * run-level metrics (throughputs, goodput, error rate) or no samples: every repeat is beyond
    L; a single run without samples has no noise estimate and its figure stands.
- x beyond L but not significantly: PASS when the interval's far end (x itself without an
  interval) stays within the margin (a max ratio r allows r + (r - 1), e.g. 1.05 -> 1.10; a min
  ratio r allows r - (1 - r); an SLO allows nothing more), else INCONCLUSIVE.
- Repeats (with two or more): samples are pooled for the above, then the verdict must hold
  across repeats: a FAIL needs a strict majority of repeats beyond L, a PASS needs no repeat
  beyond the margin; otherwise the check is INCONCLUSIVE.

Outcome: FAIL if any gated critical check FAILs (error ceiling and SLOs are always critical).
Otherwise INCONCLUSIVE if any gated check is not PASS, a non-critical FAIL included (a human
decides, like Kayenta's marginal score). Otherwise PASS. Report-only rules, and rules without a
ratio, are shown with their verdict but never gate. No results at all is INCONCLUSIVE.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from blueprints.schema import BenchmarkSpec, GateRule, GateSpec
from tasks.planning.bench_baseline import Baseline, BaselineEntry
from tasks.planning.bench_judge import Bound, Verdict, fmt, judge
from tasks.planning.bench_stats import bootstrap_ratio_ci, mann_whitney_u
from tasks.planning.metrics import ScenarioSummary, metric_value, split_metric

__all__ = ["GateReport", "GateRow", "Verdict", "evaluate_gate", "expected_points"]


@dataclass(frozen=True)
class GateRow:
    scenario: str
    concurrency: int
    metric: str
    check: str                         # errors | samples | client | results | slo | ratio
    candidate: float | None
    baseline: float | None
    ratio: float | None
    bound: str
    verdict: Verdict | None            # None: shown only, nothing to judge
    reason: str
    critical: bool = False
    gated: bool = True
    p_value: float | None = None
    ci: tuple[float, float] | None = None   # of the ratio (ratio checks) or of the mean (SLO checks)
    repeats: tuple[float, ...] = ()         # per-repeat candidate values (ratio or ms)


@dataclass(frozen=True)
class GateReport:
    outcome: Verdict
    reasons: tuple[str, ...]
    rows: tuple[GateRow, ...]
    confidence: float
    min_samples: int
    max_error_rate: float
    baseline_source: str | None = None
    baseline_run_id: str | None = None

    @property
    def scenarios(self) -> list[str]:
        return list(dict.fromkeys(r.scenario for r in self.rows))


def expected_points(benchmark: BenchmarkSpec) -> list[tuple[str, int]]:
    """Every (scenario, concurrency) the blueprint asks to measure."""
    return [(s.name, c) for s in benchmark.scenarios for c in s.concurrencies]


@dataclass(frozen=True)
class _Ctx:
    gate: GateSpec
    seed: int
    resamples: int

    def seed_for(self, *parts: object) -> int:
        # Stable across processes (str hash is salted), so a verdict can be reproduced.
        return zlib.crc32("/".join(map(str, parts)).encode()) ^ self.seed


def _ratio(value: float | None, base: float | None) -> float | None:
    if value is None or base is None:
        return None
    if base == 0:
        return 1.0 if value == 0 else float("inf")
    return value / base


def _repeat_significance(bound: Bound, repeats: Sequence[float]) -> tuple[bool, str]:
    if len(repeats) >= 2:
        n = sum(1 for r in repeats if bound.violated(r))
        return n == len(repeats), f"{n} of {len(repeats)} repeats break it"
    return True, "one run without per-request samples: the figure stands"


def _ci_text(ci: tuple[float, float] | None, conf: float, what: str) -> str:
    return f"{conf:.0%} CI of the {what} [{fmt(ci[0])}, {fmt(ci[1])}]" if ci else "no CI"


def _slo_row(s: ScenarioSummary, family: str, limit: float, blocker: str | None, ctx: _Ctx) -> GateRow:
    metric = f"{family}_mean"
    value = metric_value(s, metric)
    bound = Bound.slo(limit)
    reps = tuple(v for r in s.repeats if (v := metric_value(r, metric)) is not None)
    row = dict(scenario=s.scenario, concurrency=s.concurrency, metric=metric, check="slo", candidate=value,
               baseline=None, ratio=None, bound=bound.text(), critical=True, repeats=reps)
    if blocker:
        return GateRow(**row, verdict=Verdict.INCONCLUSIVE, reason=f"not judged: {blocker}")
    if value is None:
        return GateRow(**row, verdict=Verdict.INCONCLUSIVE, reason="no completed request to measure")
    samples = s.samples.of(family) if s.samples else ()
    ci = None
    if samples:
        ci = bootstrap_ratio_ci(samples, 1.0, "mean", ctx.gate.confidence,
                                ctx.seed_for(s.scenario, s.concurrency, metric, "slo"), ctx.resamples)
        significant, why = ci is not None and ci[0] > limit, _ci_text(ci, ctx.gate.confidence, "mean")
    else:
        significant, why = _repeat_significance(bound, reps)
    verdict, reason = judge(bound, value, significant, why, ci, reps)
    return GateRow(**row, verdict=verdict, reason=reason, ci=ci)


def _test_bound(s: ScenarioSummary, entry: BaselineEntry, metric: str, bound: Bound, ratio: float,
                reps: tuple[float, ...], ctx: _Ctx) -> tuple[Verdict, str, float | None, tuple | None]:
    parts = split_metric(metric)
    cand = s.samples.of(parts[0]) if parts and s.samples else ()
    if not cand:
        significant, why = _repeat_significance(bound, reps)
        verdict, reason = judge(bound, ratio, significant, why, None, reps)
        return verdict, reason, None, None
    family, stat = parts
    base = entry.samples.of(family) if entry.samples else ()
    conf = ctx.gate.confidence
    ci = bootstrap_ratio_ci(cand, base or entry.figures[metric], stat, conf,
                            ctx.seed_for(s.scenario, s.concurrency, metric, bound.limit), ctx.resamples)
    p = None
    if base and stat in ("mean", "p50"):
        scaled = [v / bound.limit for v in cand]
        p = mann_whitney_u(scaled, base, "greater" if bound.higher_is_worse else "less").p_value
        significant = p < 1.0 - conf
        why = f"Mann-Whitney p={p:.2g} against {bound.limit:g}× baseline, {_ci_text(ci, conf, 'ratio')}"
    else:
        significant = ci is not None and (ci[0] > bound.limit if bound.higher_is_worse else ci[1] < bound.limit)
        why = _ci_text(ci, conf, "ratio")
    verdict, reason = judge(bound, ratio, significant, why, ci, reps)
    return verdict, reason, p, ci


_SEVERITY = {Verdict.PASS: 0, Verdict.INCONCLUSIVE: 1, Verdict.FAIL: 2}


def _ratio_row(s: ScenarioSummary, rule: GateRule, baseline: Baseline | None, scenario_covered: bool,
               blocker: str | None, ctx: _Ctx) -> GateRow:
    value = metric_value(s, rule.metric)
    entry = baseline.lookup(s.scenario, s.concurrency) if baseline else None
    base = entry.figures.get(rule.metric) if entry else None
    bounds = ([Bound.max_ratio(rule.max_ratio)] if rule.max_ratio is not None else []) + \
             ([Bound.min_ratio(rule.min_ratio)] if rule.min_ratio is not None else [])
    reps = tuple(r for rep in s.repeats if (r := _ratio(metric_value(rep, rule.metric), base)) is not None)
    row = dict(scenario=s.scenario, concurrency=s.concurrency, metric=rule.metric, check="ratio",
               candidate=value, baseline=base, ratio=_ratio(value, base),
               bound=" and ".join(b.text() for b in bounds) or "none", critical=rule.critical,
               gated=bool(bounds) and not rule.report_only, repeats=reps)

    def verdict(v: Verdict | None, reason: str, **more) -> GateRow:
        return GateRow(**row, verdict=v, reason=reason, **more)

    if not bounds:
        return verdict(None, "shown only: the rule sets no ratio")
    if not scenario_covered:
        return verdict(Verdict.INCONCLUSIVE, f"the baseline has no point for scenario {s.scenario}")
    if entry is None:
        return GateRow(**{**row, "gated": False}, verdict=None,
                       reason=f"not compared: the baseline has no point at concurrency {s.concurrency} "
                              "(held to the SLOs and the error ceiling only)")
    if base is None:
        return verdict(Verdict.INCONCLUSIVE, f"the baseline has no {rule.metric} figure here")
    if entry.completed is not None and entry.completed < ctx.gate.min_samples:
        return verdict(Verdict.INCONCLUSIVE, f"the baseline measured only {entry.completed} requests "
                                             f"(< min_samples {ctx.gate.min_samples})")
    if blocker:
        return verdict(Verdict.INCONCLUSIVE, f"not judged: {blocker}")
    if value is None:
        return verdict(Verdict.INCONCLUSIVE, "the candidate has no value for this metric")
    results = [_test_bound(s, entry, rule.metric, b, row["ratio"], reps, ctx) for b in bounds]
    v, reason, p, ci = max(results, key=lambda res: _SEVERITY[res[0]])
    return verdict(v, reason, p_value=p, ci=ci)


def _point_rows(s: ScenarioSummary, baseline: Baseline | None, scenario_covered: bool,
                ctx: _Ctx) -> list[GateRow]:
    g = ctx.gate
    base = dict(scenario=s.scenario, concurrency=s.concurrency, baseline=None, ratio=None)
    errors_bad = s.error_rate > g.max_error_rate
    rows = [GateRow(**base, metric="error_rate", check="errors", candidate=s.error_rate,
                    bound=f"≤ {g.max_error_rate:.2%} of requests", critical=True,
                    repeats=tuple(r.error_rate for r in s.repeats),
                    verdict=Verdict.FAIL if errors_bad else Verdict.PASS,
                    reason=f"{s.failed} of {s.requests} requests failed ({s.error_rate:.2%})")]
    blockers = []
    few = s.completed < g.min_samples
    if few:
        blockers.append(f"only {s.completed} completed requests (< min_samples {g.min_samples})")
    rows.append(GateRow(**base, metric="completed", check="samples", candidate=float(s.completed),
                        bound=f"≥ {g.min_samples} requests", verdict=Verdict.INCONCLUSIVE if few else Verdict.PASS,
                        reason=blockers[-1] if few else "enough samples"))
    if s.client_saturated:
        blockers.append("the load generator was saturated, so latencies would measure the client")
    rows.append(GateRow(**base, metric="client", check="client", candidate=None, bound="not saturated",
                        verdict=Verdict.INCONCLUSIVE if s.client_saturated else Verdict.PASS,
                        reason=blockers[-1] if s.client_saturated else "the load generator kept up"))
    blocker = "; ".join(blockers) or None
    for family in ("ttft", "tpot", "e2e"):
        limit = getattr(g.slo, f"{family}_ms")
        if limit is not None:
            rows.append(_slo_row(s, family, limit, blocker, ctx))
    rows.extend(_ratio_row(s, rule, baseline, scenario_covered, blocker, ctx) for rule in g.rules)
    return rows


def _outcome(rows: Sequence[GateRow]) -> tuple[Verdict, tuple[str, ...]]:
    def where(r: GateRow) -> str:
        return f"{r.scenario} @ concurrency {r.concurrency}, {r.metric}: {r.reason}"

    gated = [r for r in rows if r.gated and r.verdict is not None]
    if not gated:
        return Verdict.INCONCLUSIVE, ("no benchmark results to judge",)
    fails = [r for r in gated if r.verdict is Verdict.FAIL and r.critical]
    if fails:
        return Verdict.FAIL, tuple(where(r) for r in fails)
    doubtful = [r for r in gated if r.verdict is not Verdict.PASS]
    if doubtful:
        return Verdict.INCONCLUSIVE, tuple(
            where(r) + (" (non-critical FAIL: a person decides)" if r.verdict is Verdict.FAIL else "")
            for r in doubtful)
    return Verdict.PASS, (f"all {len(gated)} gated checks passed",)


def evaluate_gate(candidate: Iterable[ScenarioSummary], baseline: Baseline | None, gate: GateSpec, *,
                  expected: Iterable[tuple[str, int]] | None = None, seed: int = 0,
                  resamples: int = 1000) -> GateReport:
    """Judge the candidate's summaries (one per scenario and concurrency) against the baseline.

    ``expected`` (see ``expected_points``) lists the points the blueprint asked for; a missing
    one is INCONCLUSIVE. The verdict is deterministic for a given ``seed``.
    """
    ctx = _Ctx(gate, seed, resamples)
    summaries = sorted(candidate, key=lambda s: (s.scenario, s.concurrency))
    covered = {s.scenario for s in summaries if baseline and baseline.lookup(s.scenario, s.concurrency)}
    rows: list[GateRow] = []
    for s in summaries:
        rows.extend(_point_rows(s, baseline, s.scenario in covered, ctx))
    measured = {(s.scenario, s.concurrency) for s in summaries}
    for scenario, concurrency in expected or ():
        if (scenario, concurrency) not in measured:
            rows.append(GateRow(scenario, concurrency, "results", "results", None, None, None, "measured",
                                Verdict.INCONCLUSIVE, "no results for this point"))
    outcome, reasons = _outcome(rows)
    return GateReport(outcome, reasons, tuple(rows), gate.confidence, gate.min_samples, gate.max_error_rate,
                      baseline.source if baseline else None, baseline.run_id if baseline else None)
