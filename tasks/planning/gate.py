"""The promotion gate: candidate benchmark summaries vs a baseline -> PASS, FAIL or INCONCLUSIVE.

Kayenta-style statistics in-process (docs/sources.md#gate-statistics). The rules,
per (scenario, concurrency) point, in the order they apply:

1. Error ceiling. error rate > ``gate.max_error_rate`` is FAIL (critical), whatever else holds:
   the issue's "5% request errors: FAIL". Errors are facts, not noise, so no statistics here.
2. Trust in the measurement. Fewer independent blocks than ``gate.min_samples`` (a block: as many
   consecutive requests as the concurrency, which share batch steps), or a saturated
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
   or was measured on fewer than min_samples blocks, is INCONCLUSIVE; so is a published figure
   whose spread the blueprint does not state (``baseline.cv``).

Each SLO or ratio check is decided from the pooled point estimate x and the bound L, which is
also the margin (``bench_judge.RATIO_RULE``: a rule "<= 1.15x" PASSes only a candidate shown
within 1.15x), at one level alpha = 1 - ``gate.confidence``, one-sided, with a method for the
statistic it is about (``tasks.planning.bench_stats``):
- FAIL: x beyond L and the violation significant. Significance is tested against the bound
  itself, not against "no change" (Kayenta's allowedIncrease):
  * a mean or a percentile of a per-request latency (and an SLO on a mean): a bootstrap of the
    ratio over time blocks of requests (as many consecutive requests as the concurrency, which
    shared batch steps; ITL gaps travel with their request), against the baseline's samples
    resampled the same way, or a published figure with the variance of its sample count and
    stated CV (``bench_stats.Figure``); p from the standard error of
    log(ratio). Repeats drift more than requests within a run vary: a side whose per-repeat
    figures spread wider than its bootstrap allows takes their spread (random effects), read
    with Student's t at the repeats' degrees of freedom;
  * a run-level figure (throughputs, goodput): a two-sample t test of the log figures against the
    baseline's own repeats (``bench_stats.repeats_ratio``), or against a published figure with its
    stated between-run CV; with no noise estimate on either side, its figure stands, as the error
    rate's does.
  The critical checks of the whole report are one family: their p-values are Holm-adjusted, so
  the chance that an equal candidate FAILs on any of them is at most alpha. A non-critical
  check is tested alone at alpha (its FAIL makes the report INCONCLUSIVE, never FAIL).
- PASS: otherwise, when the interval's end on the bad side (its one-sided bound at the
  confidence) stays within L. So a candidate as bad as the bound PASSes a check at most alpha of
  the time, however few its samples. Without an interval
  (one run of a run-level figure), x within L.
- INCONCLUSIVE: otherwise (too few samples or too much noise to tell either way).

A TTFT probe's point (``Scenario.ttft_probe``, ``tasks.planning.ttft_probe``) is judged on its TTFT
only: the error ceiling, min_samples, the SLO on TTFT and ratio rules on ``ttft_*``; every other
rule and SLO is shown, not gated ("TTFT probe: <metric> not gated"). And only once the engines
counted at least one KV transfer per completed request during it (a "transfer" check): short of
that, its checks are INCONCLUSIVE as under rule 2, the error ceiling excepted.

Outcome: FAIL if any gated critical check FAILs (error ceiling and SLOs are always critical).
Otherwise INCONCLUSIVE if any gated check is not PASS, a non-critical FAIL included (a human
decides, like Kayenta's marginal score). Otherwise PASS. Report-only rules, and rules without a
ratio, are shown with their verdict but never gate. No results at all is INCONCLUSIVE.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from blueprints.schema import BenchmarkSpec, GateRule, GateSpec
from tasks.planning.bench_baseline import Baseline, BaselineEntry
from tasks.planning.bench_judge import RATIO_RULE, Bound, Verdict, fmt, judge
from tasks.planning.bench_stats import (Blocks, Figure, RatioTest, RepeatTest, bootstrap_ratio, holm, repeats_ratio,
                                        satterthwaite, t_test, window_means)
from tasks.planning.metrics import Samples, ScenarioSummary, metric_value, split_metric
from tasks.planning.ttft_probe import (Probes, judged_on_probe, not_gated, transfer_blocker, transfers_seen,
                                       transfers_text)

__all__ = ["GateReport", "GateRow", "Looks", "PointStop", "Verdict", "between_of", "blocks_of", "candidate_spread",
           "describe_rules", "evaluate_gate", "expected_points", "recorded_spread", "transfer_row"]


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
    p_value: float | None = None       # of breaking the bound, alone
    ci: tuple[float, float] | None = None   # one-sided bounds at the confidence, of the ratio (ms for SLOs)
    repeats: tuple[float, ...] = ()         # per-repeat candidate values (ratio or ms)
    p_adjusted: float | None = None    # Holm-adjusted over the report's critical checks (what decides them)
    method: str = ""                   # how significance was tested


@dataclass(frozen=True)
class PointStop:
    """How a sequential gate's point ended: after how many rounds and how much load, and why."""

    scenario: str
    concurrency: int
    rounds: int                        # rounds measured (0: never started)
    load_s: float                      # seconds of load it took
    reason: str                        # decided | cap | budget | stopped
    alpha: float                       # the nominal level of its last look (intervals, non-critical checks)
    alpha_critical: float              # the same for its critical checks
    note: str = ""                     # the reason in words


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
    critical_tests: int = 0            # the Holm family's size (sequential: the Bonferroni family's)
    stops: tuple[PointStop, ...] = ()  # a sequential gate's points: how each decision was reached

    @property
    def scenarios(self) -> list[str]:
        return list(dict.fromkeys(r.scenario for r in self.rows))


def blocks_of(completed: int, concurrency: int) -> int:
    """Independent samples at a point: whole time blocks of as many consecutive requests as its
    concurrency (they share batch steps, so they move together); ``gate.min_samples`` counts these."""
    return completed // max(1, concurrency)


def describe_rules(gate: GateSpec) -> list[str]:
    """What the blueprint's gate means, for `pdlift validate`: the rule sentence, then each gated
    rule as the bound its checks must show, and what an undecided candidate gets."""
    conf = f"{gate.confidence:.0%}"
    lines = [RATIO_RULE]
    for rule in gate.rules:
        if rule.report_only or (rule.max_ratio is None and rule.min_ratio is None):
            continue
        kind = "critical" if rule.critical else "non-critical: a FAIL leaves the decision undecided"
        for bound, op, side, within, beyond in ((rule.max_ratio, "≤", "upper", "at most", "above"),
                                                (rule.min_ratio, "≥", "lower", "at least", "below")):
            if bound is not None:
                lines.append(f"{rule.metric} {op} {bound:g}× baseline ({kind}): PASS needs its {side} {conf} bound "
                             f"{within} {bound:g}; FAIL needs it significantly {beyond} {bound:g}")
    lines.append(f"at least {gate.min_samples} independent blocks per point (a block: as many consecutive "
                 "requests as the concurrency)")
    if gate.paired is not None:
        p = gate.paired
        contracts = ", ".join(f"{family}_mean ≤ {margin:g}" for family, margin in p.contracts.items())
        lines.append(f"with both colours live (a fleet swap; a migration beside baseline.endpoint), paired instead: "
                     f"{contracts}× the live colour, pooled over every point (PASS needs the upper {conf} bound "
                     f"within it)" + (f", and each family ≤ {p.guard:g} per input length" if p.guard else "")
                     + f"; the standard error by the jackknife over windows of at least {p.window_s:g} s and 3 "
                       f"requests' time; {p.looks} look(s)")
    lines.append("undecided at the end of the budget: " + ("rolled back with the reason and the figures"
                                                           if gate.undecided == "rollback"
                                                           else "a person decides (promotion.approval_timeout_s)"))
    return lines


def expected_points(benchmark: BenchmarkSpec) -> list[tuple[str, int]]:
    """Every (scenario, concurrency) the blueprint asks to measure."""
    return [(s.name, c) for s in benchmark.scenarios for c in s.concurrencies]


@dataclass(frozen=True)
class Looks:
    """A sequential gate's levels (``tasks.planning.gate_sequential``): each point is judged at the
    nominal levels of the look where it stopped: ``alpha`` for its intervals and non-critical
    checks, ``critical`` (from alpha / ``family``, every critical check the benchmark could make)
    for its critical checks, instead of Holm over the report."""

    alpha: Mapping[tuple[str, int], float]      # (scenario, concurrency) -> nominal level at its stop
    critical: Mapping[tuple[str, int], float]   # the same for its critical checks
    family: int
    blocked: Mapping[tuple[str, int], str] = field(default_factory=dict)   # points not to judge, and why


@dataclass(frozen=True)
class _Ctx:
    gate: GateSpec
    seed: int
    resamples: int
    looks: Looks | None = None
    probes: Probes = Probes()

    def alpha(self, scenario: str, concurrency: int) -> float:
        if self.looks is None:
            return 1.0 - self.gate.confidence
        return self.looks.alpha.get((scenario, concurrency), 1.0 - self.gate.confidence)

    def confidence(self, scenario: str, concurrency: int) -> float:
        return 1.0 - self.alpha(scenario, concurrency)

    def seed_for(self, *parts: object) -> int:
        # Stable across processes (str hash is salted), so a verdict can be reproduced.
        return (zlib.crc32("/".join(map(str, parts)).encode()) ^ self.seed) & 0xFFFFFFFF


@dataclass(frozen=True)
class _Pending:
    """A check whose verdict waits for every p-value of the report (Holm needs them all)."""

    row: GateRow                       # verdict and reason still to be decided
    bound: Bound
    point: float
    test: RatioTest | RepeatTest | None

    @property
    def in_family(self) -> bool:
        return self.row.critical and self.row.gated and self.row.p_value is not None


def _ratio(value: float | None, base: float | None) -> float | None:
    if value is None or base is None:
        return None
    if base == 0:
        return 1.0 if value == 0 else float("inf")
    return value / base


def _per_repeat(s: ScenarioSummary, metric: str) -> tuple[float, ...]:
    return tuple(v for r in s.repeats if (v := metric_value(r, metric)) is not None)


def _windows(samples: Samples | None, family: str, stat: str) -> tuple[float, ...]:
    """A run's mean per window (``bench_stats.window_means``); none for a percentile (a window's
    p99 is another statistic) or a family with several values per request (ITL gaps)."""
    if samples is None or stat != "mean" or samples.counts_of(family):
        return ()
    return window_means(samples.of(family), samples.block)


def _spread(repeats: Sequence[float], windows: Sequence[float]) -> tuple[float, ...]:
    """What a side's spread between parts is read from: its repeats, or, one run, its windows."""
    return tuple(repeats) if len(repeats) >= 2 else tuple(windows)


def candidate_spread(s: ScenarioSummary, metric: str) -> tuple[float, ...]:
    """The candidate's figures per repeat, or per window of its one run, that the gate reads its
    spread from (``bootstrap_ratio``'s ``candidate_repeats``)."""
    family, stat = split_metric(metric)  # type: ignore[misc]
    return _spread(_per_repeat(s, metric), _windows(s.samples, family, stat))


def recorded_spread(entry: BaselineEntry, metric: str) -> tuple[float, ...]:
    """The same for a recorded baseline's point (its repeats, or its run's windows)."""
    family, stat = split_metric(metric)  # type: ignore[misc]
    return _spread(entry.repeats.get(metric, ()), entry.windows.get(metric, ()) or _windows(entry.samples, family, stat))


def between_of(entry: BaselineEntry, metric: str) -> tuple[float, float | None] | None:
    """The between-session variance a check of ``metric`` against ``entry`` carries: its family's
    (a session's drift scales a family's latencies, its percentiles with its mean; ITL is the
    decode step, TPOT's family)."""
    parts = split_metric(metric)
    if parts is None:
        return None
    family = "tpot" if parts[0] == "itl" else parts[0]
    return entry.between.get(f"{family}_mean")


def _blocks(samples: Samples | None, family: str) -> Blocks | None:
    values = samples.of(family) if samples else ()
    return Blocks.of(values, samples.block, samples.counts_of(family)) if values else None  # type: ignore[union-attr]


def _pending(row: GateRow, bound: Bound, point: float, test: RatioTest | RepeatTest | None,
             conf: float) -> _Pending:
    if test is None:
        return _Pending(row, bound, point, None)
    ci = test.bounds(conf)
    p = test.p_beyond(bound.limit, bound.higher_is_worse)
    return _Pending(replace(row, p_value=p, ci=ci, method=test.method), bound, point, test)


def _slo_check(s: ScenarioSummary, family: str, limit: float, blocker: str | None,
               ctx: _Ctx) -> GateRow | _Pending:
    metric = f"{family}_mean"
    value = metric_value(s, metric)
    bound = Bound.slo(limit)
    reps = _per_repeat(s, metric)
    row = GateRow(s.scenario, s.concurrency, metric, "slo", value, None, None, bound.text(), None, "",
                  critical=True, repeats=reps)
    if blocker:
        return replace(row, verdict=Verdict.INCONCLUSIVE, reason=f"not judged: {blocker}")
    if value is None:
        return replace(row, verdict=Verdict.INCONCLUSIVE, reason="no completed request to measure")
    cand = _blocks(s.samples, family)
    if cand is None:
        test = t_test([r / limit for r in reps])
    else:
        test = bootstrap_ratio(cand, limit, "mean", ctx.seed_for(s.scenario, s.concurrency, metric, "slo"),
                               ctx.resamples, candidate_repeats=reps)
    pending = _pending(row, Bound.max_ratio(1.0), value / limit, test, ctx.confidence(s.scenario, s.concurrency))
    # Decided on the ratio to the SLO; shown in milliseconds.
    ci = pending.row.ci
    shown = replace(pending.row, ci=(ci[0] * limit, ci[1] * limit) if ci else None)
    return _Pending(shown, bound, value, pending.test)


def _baseline_side(rule: GateRule, entry: BaselineEntry, family: str | None, stat: str,
                   samples: bool = True) -> Blocks | Figure | str:
    """The baseline as the test sees it: its samples, or its figure with the spread it was measured
    with (stated for published figures, its repeats' for a recorded one without samples, with
    their degrees of freedom); a reason when nothing says how exact the figure is."""
    if samples and family is not None and (blocks := _blocks(entry.samples, family)) is not None:
        return blocks
    value = entry.figures[rule.metric]
    cv = entry.cv.get("run" if family is None else family)
    if cv is not None and (family is None or entry.completed):
        return Figure.of(value, "run" if family is None else stat, cv, entry.completed or 1)
    reps = [math.log(r) for r in _spread(entry.repeats.get(rule.metric, ()), entry.windows.get(rule.metric, ()))
            if r > 0]
    if len(reps) >= 2:
        mean = math.fsum(reps) / len(reps)
        within = math.fsum((r - mean) ** 2 for r in reps) / (len(reps) - 1) / len(reps)
        between = between_of(entry, rule.metric)
        if between is None:
            return Figure(value, within, float(len(reps) - 1))
        return Figure(value, within + between[0], satterthwaite((within, float(len(reps) - 1)), between))
    if not entry.cv and entry.completed is not None:   # recorded, without samples of this kind
        return (f"the recorded baseline kept no {family or rule.metric} samples and fewer than 2 repeats of "
                f"{rule.metric}, so its figure's spread is unknown and it cannot be compared without holding "
                "it exact (record the baseline with these samples or with repeats)")
    what = "between runs (baseline.cv.run)" if family is None else f"of one request's {family} (baseline.cv.{family})"
    return (f"the baseline's {rule.metric} figure carries no spread {what}, so it cannot be compared "
            "without holding it exact")


def _ratio_check(s: ScenarioSummary, rule: GateRule, bound: Bound, entry: BaselineEntry, row: GateRow,
                 ctx: _Ctx) -> GateRow | _Pending:
    parts = split_metric(rule.metric)
    cand = _blocks(s.samples, parts[0]) if parts else None
    conf = ctx.confidence(s.scenario, s.concurrency)
    if cand is None:  # a run-level figure, or results without samples: the repeats are the evidence
        recorded = entry.repeats.get(rule.metric, ())
        base = recorded if recorded else _baseline_side(rule, entry, parts[0] if parts else None,
                                                        parts[1] if parts else "run", samples=False)
        if isinstance(base, str):
            if entry.cv or entry.completed is None:   # published: its spread is not stated
                return replace(row, verdict=Verdict.INCONCLUSIVE, reason=base)
            base = (entry.figures[rule.metric],)      # a recorded run-level figure of one run
        runs = _per_repeat(s, rule.metric) or ((row.candidate,) if row.candidate is not None else ())
        test = repeats_ratio(runs, base)
        return _pending(row, bound, test.ratio if test else row.ratio, test, conf)  # type: ignore[arg-type]
    family, stat = parts  # type: ignore[misc]
    base = _baseline_side(rule, entry, family, stat)
    if isinstance(base, str):
        return replace(row, verdict=Verdict.INCONCLUSIVE, reason=base)
    sampled = isinstance(base, Blocks)
    test = bootstrap_ratio(cand, base, stat, ctx.seed_for(s.scenario, s.concurrency, rule.metric, bound.limit),
                           ctx.resamples, candidate_repeats=candidate_spread(s, rule.metric),
                           baseline_repeats=recorded_spread(entry, rule.metric) if sampled else (),
                           between=between_of(entry, rule.metric) if sampled else None)
    return _pending(row, bound, row.ratio, test, conf)  # type: ignore[arg-type]


def _ratio_checks(s: ScenarioSummary, rule: GateRule, baseline: Baseline | None, scenario_covered: bool,
                  blocker: str | None, ctx: _Ctx) -> list[GateRow | _Pending]:
    value = metric_value(s, rule.metric)
    entry = baseline.lookup(s.scenario, s.concurrency) if baseline else None
    base = entry.figures.get(rule.metric) if entry else None
    bounds = ([Bound.max_ratio(rule.max_ratio)] if rule.max_ratio is not None else []) + \
             ([Bound.min_ratio(rule.min_ratio)] if rule.min_ratio is not None else [])
    reps = tuple(r for rep in s.repeats if (r := _ratio(metric_value(rep, rule.metric), base)) is not None)
    row = GateRow(s.scenario, s.concurrency, rule.metric, "ratio", value, base, _ratio(value, base),
                  " and ".join(b.text() for b in bounds) or "none", None, "", critical=rule.critical,
                  gated=bool(bounds) and not rule.report_only, repeats=reps)

    def decided(v: Verdict | None, reason: str, **more) -> list[GateRow | _Pending]:
        return [replace(row, verdict=v, reason=reason, **more)]

    if not bounds:
        return decided(None, "shown only: the rule sets no ratio")
    if s.scenario in ctx.probes and not judged_on_probe(rule.metric):
        return decided(None, not_gated(rule.metric), gated=False)
    if not scenario_covered:
        return decided(Verdict.INCONCLUSIVE, f"the baseline has no point for scenario {s.scenario}")
    if entry is None:
        return decided(None, f"not compared: the baseline has no point at concurrency {s.concurrency} "
                             "(held to the SLOs and the error ceiling only)", gated=False)
    if base is None:
        return decided(Verdict.INCONCLUSIVE, f"the baseline has no {rule.metric} figure here")
    if entry.completed is not None and blocks_of(entry.completed, entry.concurrency) < ctx.gate.min_samples:
        return decided(Verdict.INCONCLUSIVE, f"the baseline measured only {entry.completed} requests, "
                                             f"{blocks_of(entry.completed, entry.concurrency)} independent blocks "
                                             f"of {entry.concurrency} (< min_samples {ctx.gate.min_samples})")
    if blocker:
        return decided(Verdict.INCONCLUSIVE, f"not judged: {blocker}")
    if value is None:
        return decided(Verdict.INCONCLUSIVE, "the candidate has no value for this metric")
    # A rule with both bounds is one row per bound; the worse verdict is kept (_merge_bounds).
    return [_ratio_check(s, rule, b, entry, replace(row, bound=b.text()), ctx) for b in bounds]


def _point_checks(s: ScenarioSummary, baseline: Baseline | None, scenario_covered: bool,
                  ctx: _Ctx) -> list[GateRow | _Pending]:
    g = ctx.gate
    errors_bad = s.error_rate > g.max_error_rate
    out: list[GateRow | _Pending] = [
        GateRow(s.scenario, s.concurrency, "error_rate", "errors", s.error_rate, None, None,
                f"≤ {g.max_error_rate:.2%} of requests", Verdict.FAIL if errors_bad else Verdict.PASS,
                f"{s.failed} of {s.requests} requests failed ({s.error_rate:.2%})", critical=True,
                repeats=tuple(r.error_rate for r in s.repeats))]
    blockers = [ctx.looks.blocked[(s.scenario, s.concurrency)]] \
        if ctx.looks is not None and (s.scenario, s.concurrency) in ctx.looks.blocked else []
    blocks = blocks_of(s.completed, s.concurrency)
    few = blocks < g.min_samples
    if few:
        blockers.append(f"only {blocks} independent blocks of {s.concurrency} requests ({s.completed} completed; "
                        f"< min_samples {g.min_samples})")
    out.append(GateRow(s.scenario, s.concurrency, "completed", "samples", float(blocks), None, None,
                       f"≥ {g.min_samples} blocks", Verdict.INCONCLUSIVE if few else Verdict.PASS,
                       blockers[-1] if few else f"enough samples: {blocks} blocks of {s.concurrency} requests"))
    if s.client_saturated:
        blockers.append("the load generator was saturated, so latencies would measure the client")
    out.append(GateRow(s.scenario, s.concurrency, "client", "client", None, None, None, "not saturated",
                       Verdict.INCONCLUSIVE if s.client_saturated else Verdict.PASS,
                       blockers[-1] if s.client_saturated else "the load generator kept up"))
    probe = s.scenario in ctx.probes
    if probe:
        out.append(transfer_row(s, ctx.probes))
        if out[-1].verdict is not Verdict.PASS:
            blockers.append(out[-1].reason)
    blocker = "; ".join(blockers) or None
    for family in ("ttft", "tpot", "e2e"):
        limit = getattr(g.slo, f"{family}_ms")
        if limit is not None and probe and not judged_on_probe(family):
            out.append(GateRow(s.scenario, s.concurrency, f"{family}_mean", "slo", metric_value(s, f"{family}_mean"),
                               None, None, Bound.slo(limit).text(), None, not_gated(f"{family}_mean"),
                               critical=True, gated=False))
        elif limit is not None:
            out.append(_slo_check(s, family, limit, blocker, ctx))
    for rule in g.rules:
        out.extend(_ratio_checks(s, rule, baseline, scenario_covered, blocker, ctx))
    return out


def transfer_row(s: ScenarioSummary, probes: Probes) -> GateRow:
    """A TTFT probe's point: whether the engines counted at least as many KV transfers as it
    completed requests (a floor: judged only if so)."""
    reason = transfer_blocker(s, probes)
    return GateRow(s.scenario, s.concurrency, "kv_transfers", "transfer", transfers_seen(s), None, None,
                   "≥ completed requests", Verdict.INCONCLUSIVE if reason else Verdict.PASS,
                   reason or transfers_text(s, probes), critical=True)


def _decide(checks: list[GateRow | _Pending], ctx: _Ctx) -> tuple[list[GateRow], int]:
    """Every pending check decided: the critical ones as one Holm family (a sequential gate:
    Bonferroni over its whole family at each point's look), the others alone."""
    family = {i: c.row.p_value for i, c in enumerate(checks) if isinstance(c, _Pending) and c.in_family}
    adjusted = holm(family) if ctx.looks is None else {}
    rows = []
    for i, c in enumerate(checks):
        if isinstance(c, GateRow):
            rows.append(c)
            continue
        row = c.row
        alpha = ctx.alpha(row.scenario, row.concurrency)
        if row.p_value is None:
            significant, why = True, ("one run without per-request samples: the figure stands" if len(row.repeats) < 2
                                      else "no interval could be computed: the figure stands")
        elif ctx.looks is not None and i in family:
            m, level = ctx.looks.family, ctx.looks.critical.get((row.scenario, row.concurrency), 0.0)
            significant = row.p_value < level
            why = (f"{row.method}: p={row.p_value:.2g} {'<' if significant else '≥'} {level:.2g} "
                   f"(this look's boundary, alpha/{m} spent over the looks for {m} critical checks)")
        elif i in adjusted:
            p_adj = adjusted[i]
            significant = p_adj < alpha
            why = (f"{row.method}: p={row.p_value:.2g}, Holm-adjusted over {len(family)} critical checks "
                   f"{p_adj:.2g} {'<' if significant else '≥'} {alpha:g}")
            row = replace(row, p_adjusted=p_adj)
        else:
            significant = row.p_value < alpha
            why = f"{row.method}: p={row.p_value:.2g} {'<' if significant else '≥'} {alpha:g}"
        verdict, reason = judge(c.bound, c.point, significant, why, row.ci)
        rows.append(replace(row, verdict=verdict, reason=reason))
    return _merge_bounds(rows), len(family)


_SEVERITY = {None: -1, Verdict.PASS: 0, Verdict.INCONCLUSIVE: 1, Verdict.FAIL: 2}


def _merge_bounds(rows: list[GateRow]) -> list[GateRow]:
    """A ratio rule with a max and a min bound shows one row: the worse of its two verdicts."""
    out: list[GateRow] = []
    for row in rows:
        prev = out[-1] if out else None
        if (prev is not None and row.check == "ratio" and prev.check == "ratio"
                and (prev.scenario, prev.concurrency, prev.metric) == (row.scenario, row.concurrency, row.metric)):
            keep = row if _SEVERITY[row.verdict] > _SEVERITY[prev.verdict] else prev
            out[-1] = replace(keep, bound=f"{prev.bound} and {row.bound}")
        else:
            out.append(row)
    return out


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
                  resamples: int = 1000, looks: Looks | None = None,
                  stops: Sequence[PointStop] = (), probes: Probes = Probes()) -> GateReport:
    """Judge the candidate's summaries (one per scenario and concurrency) against the baseline.

    ``expected`` (see ``expected_points``) lists the points the blueprint asked for; a missing
    one is INCONCLUSIVE. ``looks`` and ``stops``: a sequential gate's level per point and how
    each point ended (``tasks.planning.gate_sequential``). ``probes``: the benchmark's TTFT probes
    (``ttft_probe.Probes.of(blueprint)``), judged on TTFT once their transfers are shown. The verdict is
    deterministic for a given ``seed``.
    """
    ctx = _Ctx(gate, seed, resamples, looks, probes)
    summaries = sorted(candidate, key=lambda s: (s.scenario, s.concurrency))
    # A scenario the baseline covers at some concurrency: its other concurrencies are "not compared"
    # (SLOs and errors only), whichever points are judged together (a sequential look judges one).
    covered = {s.scenario for s in summaries if baseline and baseline.covers(s.scenario)}
    checks: list[GateRow | _Pending] = []
    for s in summaries:
        checks.extend(_point_checks(s, baseline, s.scenario in covered, ctx))
    measured = {(s.scenario, s.concurrency) for s in summaries}
    unmeasured = {(st.scenario, st.concurrency): st.note for st in stops if st.rounds == 0}
    for scenario, concurrency in expected or ():
        if (scenario, concurrency) not in measured:
            checks.append(GateRow(scenario, concurrency, "results", "results", None, None, None, "measured",
                                  Verdict.INCONCLUSIVE,
                                  unmeasured.get((scenario, concurrency)) or "no results for this point"))
    rows, family = _decide(checks, ctx)
    outcome, reasons = _outcome(rows)
    return GateReport(outcome, reasons, tuple(rows), gate.confidence, gate.min_samples, gate.max_error_rate,
                      baseline.source if baseline else None, baseline.run_id if baseline else None,
                      looks.family if looks else family, tuple(stops))
