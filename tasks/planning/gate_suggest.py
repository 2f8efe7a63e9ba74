"""`pdlift plan --suggest-gate`: the cheapest paired design that decides for this blueprint. Pure.

From the same projections as ``gate_sizing.size_paired`` (requests per second by Little's law
from the published figures, a point's log ratio with variance 2 cv^2 / n over n requests a
colour), for the blueprint's points, contracts, guard, window and looks (``gate.paired``, or its
defaults):

- every point first gets the least load its rounds need to hold 2 windows each
  (``paired_windows.windows_planned``);
- a check (a contract over every point, a guard over one input length) decides at 90% power for
  the whole gate when its pooled information, sum of n_p / cv_p^2 over its points (the inverse of
  its variance under inverse-variance weights, times 2), reaches 2 (z_a + z_b)^2 / ln(margin)^2,
  z_a at the last look's PASS level; a check short of it gets the missing load on its point with
  the most information per minute (rate / cv^2): the load goes where the information is;
- the weights are then each point's share of that information, per family, fixed before the run.

Optimistic as the sizing is (no drift, no time blocks): measure the result with
``scripts/bench/gate_sim.py`` before relying on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from blueprints.schema import Blueprint, PairedGateSpec
from tasks.planning.bench_baseline import baseline_from_spec
from tasks.planning.bench_stats import normal_quantile
from tasks.planning.gate_paired import Levels, Point
from tasks.planning.gate_sizing import POWER, nearest_entry, request_rate
from tasks.planning.paired_windows import REQUEST_TIMES, checks, point_key

ROUNDS_OF_PASSES = 20     # each pass only adds load, and two suffice in practice


@dataclass(frozen=True)
class Suggestion:
    spec: PairedGateSpec                   # gate.paired with the weights filled in
    duration_s: dict[str, float]           # per scenario (its concurrencies share it)
    minutes: float
    budget_minutes: float | None
    why: tuple[str, ...]                   # per point, what set its load

    @property
    def fits(self) -> bool:
        return self.budget_minutes is None or self.minutes <= self.budget_minutes + 1e-9

    def yaml(self) -> str:
        weights = "\n".join(f"      {family}: {{" + ", ".join(f"{k}: {w:g}" for k, w in named.items()) + "}"
                            for family, named in self.spec.weights.items())
        contracts = ", ".join(f"{f}: {m:g}" for f, m in self.spec.contracts.items())
        scenarios = "\n".join(f"#   {name}: duration_s: {d:.0f}" for name, d in self.duration_s.items())
        return (f"# benchmark.scenarios (each scenario's duration_s; {self.minutes:.1f} min of load in all):\n"
                f"{scenarios}\ngate:\n  paired:\n    window_s: {self.spec.window_s:g}\n    looks: {self.spec.looks}\n"
                f"    spending: {self.spec.spending:g}\n    contracts: {{{contracts}}}\n"
                f"    guard: {'null' if self.spec.guard is None else f'{self.spec.guard:g}'}\n    weights:\n{weights}\n")


def suggest_gate(bp: Blueprint) -> Suggestion:
    spec = bp.gate.paired or PairedGateSpec()
    baseline = baseline_from_spec(bp.baseline) if bp.baseline.scenarios else None
    scenarios = {s.name: s for s in bp.benchmark.scenarios}
    rate: dict[Point, float] = {}
    cv: dict[tuple[str, Point], float] = {}
    for s in bp.benchmark.scenarios:
        for c in s.concurrencies:
            entry = nearest_entry(baseline, s.name, c)
            if entry is None:
                raise ValueError(f"baseline.scenarios.{s.name}: no published figure to project its load from; "
                                 "publish one (with completed and cv) to size a gate for it")
            rate[(s.name, c)] = request_rate(s, c, entry)
            for family in spec.contracts:
                value = entry.cv.get(family)
                if value is None:
                    raise ValueError(f"baseline.cv.{family}: no stated spread for {family} at {s.name}")
                cv[(family, (s.name, c))] = value
    made = checks(spec, bp.benchmark)
    levels = Levels.of(1.0 - bp.gate.confidence, spec.looks, spec.spending, len(made))
    z = normal_quantile(1.0 - levels.passing[-1]) + normal_quantile(POWER ** (1.0 / len(made)))
    seconds: dict[Point, float] = {}
    why: dict[Point, str] = {}
    for point in rate:
        e2e = point[1] / rate[point]                      # Little's law: concurrency / rate
        seconds[point] = spec.looks * 2 * max(spec.window_s, REQUEST_TIMES * e2e)
        why[point] = f"2 windows a round ({max(spec.window_s, REQUEST_TIMES * e2e):.0f} s each)"
    for _ in range(ROUNDS_OF_PASSES):
        short = False
        for check in made:
            needed = 2.0 * z * z / math.log(check.margin) ** 2
            have = math.fsum(rate[p] * seconds[p] / cv[(check.family, p)] ** 2 for p in check.weights)
            if have >= needed * (1 - 1e-9):
                continue
            best = max(check.weights, key=lambda p: rate[p] / cv[(check.family, p)] ** 2)
            seconds[best] += (needed - have) * cv[(check.family, best)] ** 2 / rate[best]
            why[best] = f"{check.name} at {check.margin:g}"
            short = True
        if not short:
            break
    # A point stops at its request cap whatever its duration: a design past it cannot be run.
    capped = [f"{point_key(p)} needs about {rate[p] * t:.0f} requests, over its max_requests "
              f"{scenarios[p[0]].max_requests}" for p, t in seconds.items() if rate[p] * t > scenarios[p[0]].max_requests]
    if capped:
        raise ValueError("; ".join(capped) + ": raise benchmark.scenarios.*.max_requests")
    # A scenario's concurrencies share its duration_s: each runs the longest its points need.
    duration = {name: float(math.ceil(max(seconds[(name, c)] for c in scenarios[name].concurrencies)))
                for name in scenarios}   # whole seconds, rounded up
    loaded = {(name, c): duration[name] for name in scenarios for c in scenarios[name].concurrencies}
    weights = {}
    for family, check in ((c.family, c) for c in made if c.kind == "contract"):
        # The contract's own points: a TTFT probe's weigh in the TTFT contract only.
        info = {p: rate[p] * loaded[p] / cv[(family, p)] ** 2 for p in loaded if p in check.weights}
        total = math.fsum(info.values())
        weights[family] = {point_key(p): float(f"{i / total:.3g}") for p, i in info.items()}   # never 0
    minutes = math.fsum(loaded.values()) / 60.0
    return Suggestion(spec.model_copy(update={"weights": weights}), duration, minutes, bp.benchmark.budget_minutes,
                      tuple(f"{point_key(p)}: {duration[p[0]]:.0f} s, set by {why[p]}" for p in loaded))
