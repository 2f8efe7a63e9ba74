"""Whether the blueprint's gate can decide within its load, before any load is run. Pure.

For every check the gate will make with a ratio (each gated rule at each point the published
baseline covers), from the load the blueprint plans and the uncertainty the baseline states:

- the projected load at the point: requests per second by Little's law from the baseline's own
  figures, concurrency / (TTFT + output_tokens x TPOT) (an equal candidate runs as fast), over
  the point's cap (``duration_s``, at most ``max_requests``, within ``benchmark.budget_minutes``);
- the projected standard error of log(candidate / baseline): the candidate's n requests at the
  per-request CV the baseline states, cv^2 / n (cv^2 q(1 - q) / (n phi(z_q)^2) for a percentile),
  plus the published figure's own variance (``bench_stats.Figure``);
- P(PASS | equal): the chance its upper bound comes out within the rule, Phi(ln r / SE - z_a);
  P(FAIL | twice the margin): the chance a candidate twice as far from 1 as the rule is shown
  significantly beyond it, at a critical check's Bonferroni level alpha / m (Holm's first step);
- the smallest margin it can certify at 90% power for the whole gate (every gated check must
  PASS, so each needs power 0.9^(1/m)): exp(SE (z_a + z_b)); and the minutes of load that the
  margin written would need, or "never" when the baseline's own variance alone is too large.

A check is undecidable when the margin written needs more load than the point's cap, or the
baseline publishes no figure for it (it is INCONCLUSIVE every time, so the gate never PASSes).
What this leaves out, each making it optimistic: the time blocks (requests in flight together
move together; the gate's bootstrap counts them), the drift between sessions (the old service
measured another day: 0.02 per session in the study behind ``gate_paired``; against a recorded
baseline the gate adds what the deployment's A/A history shows, ``aa_offsets``), and the
group-sequential looks (about 15% more load than a single look). A rule on a run-level figure
(a throughput) is not sized: its noise is between runs, which nothing states before a run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from blueprints.schema import Blueprint, GateRule
from tasks.planning.bench_baseline import baseline_from_spec
from tasks.planning.bench_stats import Figure, normal_quantile, normal_sf
from tasks.planning.gate_paired import Levels
from tasks.planning.metrics import split_metric
from tasks.planning.paired_windows import checks as paired_checks
from tasks.planning.paired_windows import windows_planned
from tasks.planning.ttft_probe import judged_on_probe

POWER = 0.90


@dataclass(frozen=True)
class CheckSize:
    scenario: str
    concurrency: int
    metric: str
    rule: float                        # the ratio rule r (max or min)
    critical: bool
    requests: int                      # projected at the point's cap
    minutes: float                     # the point's cap, minutes of load
    se: float | None                   # projected SE of log(ratio); None: not sized
    p_pass_equal: float | None
    p_fail_twice: float | None
    smallest_margin: float | None      # the rule it could certify at 90% power for the gate
    minutes_needed: float | None       # for the rule written; inf: never against this baseline
    decidable: bool
    why: str


@dataclass(frozen=True)
class GateSize:
    checks: tuple[CheckSize, ...]
    p_pass_equal: float | None         # all gated checks PASS at once (independent checks)
    stated_cv: bool                    # the CVs are stated in the blueprint, not measured
    notes: tuple[str, ...]

    @property
    def undecidable(self) -> tuple[CheckSize, ...]:
        return tuple(c for c in self.checks if not c.decidable)


def _phi(x: float) -> float:
    return 1.0 - normal_sf(x)


def _var_factor(stat: str) -> float:
    """Per-request variance of a statistic relative to a mean's (1 for a mean)."""
    return Figure.of(1.0, stat, 1.0, 1).var_log


def size_gate(bp: Blueprint) -> GateSize:
    gate, bench = bp.gate, bp.benchmark
    alpha = 1.0 - gate.confidence
    rules = [r for r in gate.rules if not r.report_only and (r.max_ratio is not None or r.min_ratio is not None)]
    points = [(s, c) for s in bench.scenarios for c in s.concurrencies]
    baseline = baseline_from_spec(bp.baseline) if bp.baseline.scenarios else None
    covered = [(s, c, e) for s, c in points if baseline and (e := baseline.lookup(s.name, c)) is not None]

    def gated(scenario) -> list:   # a TTFT probe's point is judged on TTFT only
        return [r for r in rules if not scenario.ttft_probe or judged_on_probe(r.metric)]

    def bounds(rule) -> int:
        return (rule.max_ratio is not None) + (rule.min_ratio is not None)

    m = max(1, sum(bounds(r) for s, _, _ in covered for r in gated(s)))
    m_critical = max(1, sum(bounds(r) for s, _, _ in covered for r in gated(s) if r.critical))
    z_a, z_b = normal_quantile(1.0 - alpha), normal_quantile(POWER ** (1.0 / m))
    budget_s = bench.budget_minutes * 60.0 if bench.budget_minutes is not None else math.inf
    checks = []
    for scenario, concurrency in points:
        # Every point's checks wait for min_samples blocks; one that never has them is never
        # judged, and its samples check keeps the whole gate from PASSing.
        nearest = nearest_entry(baseline, scenario.name, concurrency)
        projected = _projected_requests(scenario, concurrency, nearest, budget_s)
        if projected is not None and projected // concurrency < gate.min_samples:
            checks.append(CheckSize(scenario.name, concurrency, "completed", float(gate.min_samples), True, projected,
                                    min(scenario.duration_s, budget_s) / 60.0, None, None, None, None, None, False,
                                    f"{scenario.name} @ {concurrency}: about {projected} requests in its cap are "
                                    f"{projected // concurrency} blocks of {concurrency}, under min_samples "
                                    f"{gate.min_samples}: never judged, so the gate never PASSes"))
    for scenario, concurrency, entry in covered:
        rate, cap_s = request_rate(scenario, concurrency, entry), min(scenario.duration_s, budget_s)
        n = _projected_requests(scenario, concurrency, entry, budget_s)
        for rule in gated(scenario):
            for r in (rule.max_ratio, rule.min_ratio):
                if r is not None:
                    checks.append(_size(rule, r, scenario.name, concurrency, entry, n, rate, cap_s, z_a, z_b, alpha,
                                        m_critical, scenario.max_requests))
    passing = [c.p_pass_equal for c in checks]
    p_all = math.prod(passing) if checks and all(p is not None for p in passing) else None  # type: ignore[misc]
    notes = []
    if checks:
        notes.append("optimistic: time blocks, drift between sessions and the sequential looks are left out "
                     "(tasks/planning/gate_sizing.py)")
    if rules and not covered:
        notes.append("no published baseline point: the ratio rules are judged against the last promotion's "
                     "recording, whose spread the plan cannot see")
    paired = size_paired(bp) if gate.paired is not None else ()
    if paired:
        notes.append("paired checks (gate.paired: a fleet swap, or a migration beside baseline.endpoint): both "
                     "colours' request noise counted, drift between them cancelled, at the last look's levels")
    return GateSize(tuple(checks) + paired, p_all, bool(baseline and covered), tuple(notes))


def size_paired(bp: Blueprint) -> tuple[CheckSize, ...]:
    """Each paired check (``paired_windows.checks``) projected from the published figures: a point's
    log ratio has variance 2 cv^2 / n over n requests a colour (both colours' own noise; what
    drifts in common cancels), a check the weighted sum of its points' (weights normalised); a
    point whose rounds hold fewer than 2 windows leaves its checks undecidable."""
    spec, gate = bp.gate.paired, bp.gate
    alpha = 1.0 - gate.confidence
    checks = paired_checks(spec, bp.benchmark)
    # At the last look's levels: the looks before it spent part of alpha.
    levels = Levels.of(alpha, spec.looks, spec.spending, len(checks))
    z_a, z_b = normal_quantile(1.0 - levels.passing[-1]), normal_quantile(POWER ** (1.0 / len(checks)))
    budget_s = bp.benchmark.budget_minutes * 60.0 if bp.benchmark.budget_minutes is not None else math.inf
    baseline = baseline_from_spec(bp.baseline) if bp.baseline.scenarios else None
    scenarios = {s.name: s for s in bp.benchmark.scenarios}
    per_point: dict[tuple[str, int], tuple[int, float, str | None]] = {}   # requests, cap s, why not
    entries: dict[tuple[str, int], object] = {}
    for name, scenario in scenarios.items():
        for c in scenario.concurrencies:
            entry = nearest_entry(baseline, name, c)
            cap = min(scenario.duration_s, budget_s)
            if entry is None:   # nothing to project from; the paired gate itself needs no figure
                per_point[(name, c)] = (0, cap, None)
                continue
            entries[(name, c)] = entry
            e2e = 1.0 / request_rate(scenario, 1, entry)
            windows = windows_planned(cap, spec.looks, spec.window_s, e2e)
            short = None if windows >= 2 * spec.looks else (
                f"{name} @ {c}: rounds of {cap / spec.looks:.0f} s hold {windows // spec.looks} window(s) of at least "
                f"3 requests' {e2e:.1f} s; lengthen duration_s or shorten gate.paired.window_s")
            per_point[(name, c)] = (_projected_requests(scenario, c, entry, budget_s), cap, short)
    out = []
    for check in checks:
        total = math.fsum(check.weights.values())
        where = "all points" if check.kind == "contract" else check.name.split(" @ ", 1)[1]
        cap_min = sum(per_point[p][1] for p in check.weights) / 60.0
        base = CheckSize(where, 0, f"{check.family}_mean (paired {check.kind})", check.margin, True, 0, cap_min,
                         None, None, None, None, None, False, "")
        blocked = [per_point[p][2] for p in check.weights if per_point[p][2]]
        if blocked:
            out.append(replace(base, why=blocked[0]))
            continue
        unknown = [p for p in check.weights if p not in entries or entries[p].cv.get(check.family) is None]
        if unknown:   # not sized, as a rule without a stated spread is not: the run itself decides
            out.append(replace(base, decidable=True, why=f"{check.name} (paired {check.kind}): not sized: no "
                                                         f"published {check.family} figure with its spread at "
                                                         f"{unknown[0][0]} @ {unknown[0][1]} to project from"))
            continue
        var = 0.0
        for p, w in check.weights.items():
            entry = entries[p]
            cv = entry.cv.get(check.family)
            var += (w / total) ** 2 * 2.0 * cv * cv / per_point[p][0]
        se, d = math.sqrt(var), math.log(check.margin)
        need_se = d / (z_a + z_b)
        needed = cap_min * (se / need_se) ** 2
        p_fail = _phi((abs(math.log(1.0 + 2.0 * (check.margin - 1.0))) - d) / se
                      - normal_quantile(1.0 - levels.failing[-1]))
        out.append(replace(base, requests=sum(per_point[p][0] for p in check.weights), se=se,
                           p_pass_equal=_phi(d / se - z_a), p_fail_twice=p_fail,
                           smallest_margin=math.exp(se * (z_a + z_b)), minutes_needed=needed,
                           decidable=needed <= cap_min,
                           why=f"{check.name} (paired {check.kind}) ≤ {check.margin:g}: SE {se:.4f} over "
                               f"{cap_min:.0f} min; smallest margin it can certify {math.exp(se * (z_a + z_b)):.3f}; "
                               f"{needed:.0f} min needed for {check.margin:g}"))
    return tuple(out)


def _projected_requests(scenario, concurrency: int, entry, budget_s: float) -> int | None:
    """Requests the point's cap holds, by Little's law from the published figures at this point or,
    failing that, at the scenario's nearest published concurrency (latency grows with load, so a
    lower one overestimates: the samples check is then lenient). None without any figure."""
    if entry is None:
        return None
    return max(1, min(scenario.max_requests, int(request_rate(scenario, concurrency, entry) * min(scenario.duration_s, budget_s))))


def nearest_entry(baseline, scenario: str, concurrency: int):
    """The published point of ``scenario`` nearest ``concurrency`` (None without one): the figures
    a projection of that point's load starts from."""
    published = [e for e in (baseline.entries if baseline else ()) if e.scenario == scenario]
    return min(published, key=lambda e: abs(e.concurrency - concurrency), default=None)


def request_rate(scenario, concurrency: int, entry) -> float:
    """Requests per second by Little's law from the published means: concurrency / end-to-end time."""
    return concurrency / ((entry.figures["ttft_mean"] + scenario.output_tokens * entry.figures["tpot_mean"]) / 1000.0)


def _size(rule: GateRule, r: float, scenario: str, concurrency: int, entry, n: int, rate: float, cap_s: float,
          z_a: float, z_b: float, alpha: float, m_critical: int, max_requests: int) -> CheckSize:
    minutes = cap_s / 60.0
    parts = split_metric(rule.metric)
    base = CheckSize(scenario, concurrency, rule.metric, r, rule.critical, n, minutes, None, None, None, None, None,
                     False, "")
    if rule.metric not in entry.figures:
        return replace(base, why=f"the baseline publishes no {rule.metric} at {scenario} @ {concurrency}: "
                                  "INCONCLUSIVE every time (publish it, or make the rule report_only)")
    cv = entry.cv.get(parts[0]) if parts else None
    if parts is None or cv is None:
        what = "a run-level figure: its noise is between runs" if parts is None else \
            f"no stated CV for {parts[0]} (baseline.cv.{parts[0]})"
        return replace(base, decidable=parts is None, why=f"not sized: {what}")
    family, stat = parts
    factor = _var_factor(stat)
    own = Figure.of(entry.figures[rule.metric], stat, cv, entry.completed or 1).var_log
    se = math.sqrt(cv * cv * factor / n + own)
    d = abs(math.log(r))
    twice = abs(math.log(max(1e-9, 1.0 + 2.0 * (r - 1.0))))
    level_fail = alpha / m_critical if rule.critical else alpha
    p_pass = _phi(d / se - z_a) if d > 0 else 0.0
    p_fail = _phi((twice - d) / se - normal_quantile(1.0 - level_fail))
    smallest = math.exp(se * (z_a + z_b))
    smallest = smallest if r >= 1.0 else 1.0 / smallest
    need_se = d / (z_a + z_b)
    room = need_se * need_se - own
    needed = math.inf if room <= 0 or d == 0 else cv * cv * factor / (rate * room) / 60.0
    # The requests it needs must also fit the point's max_requests, which stops a point before its cap.
    needed = math.inf if needed * 60.0 * rate > max_requests else needed
    decidable = needed <= minutes
    why = (f"{rule.metric} {'≤' if r >= 1 else '≥'} {r:g} at {scenario} @ {concurrency}: SE {se:.3f} over "
           f"{n} requests in {minutes:.0f} min; smallest margin it can certify {smallest:.3f}; "
           + ("never certifiable against this baseline (its own variance is too large)" if math.isinf(needed)
              else f"{needed:.0f} min needed for {r:g}"))
    return CheckSize(scenario, concurrency, rule.metric, r, rule.critical, n, minutes, se, p_pass, p_fail, smallest,
                     needed, decidable, why)
