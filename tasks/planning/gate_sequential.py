"""The sequential gate: each point measured in rounds, judged after every round, stopped once
decided. Pure: the benchmark stage and ``scripts/bench/gate_sim.py`` drive the same ``Schedule``.

Method (docs/sources.md#sequential-gate): a group-sequential design with Lan-DeMets alpha
spending, the power family alpha(t) = alpha * t^rho (``tasks.planning.group_sequential``). A
point has K looks, one after each of its rounds (t = k / K of its cap, ``duration_s``). At look k
it is judged by the gate's own tests (``tasks.planning.gate``) at that look's nominal level: the
boundary that makes the chance of crossing at any look, under the joint distribution of the z
statistics of accumulating data, exactly alpha. So however often it looks, an equal candidate
FAILs a check, or one as bad as the margin PASSes it, with a chance of alpha (one-sided, each
side its own spending). The critical checks spend alpha / M, M being every critical check the
benchmark could make (``critical_family``): a point's decision depends on its own rounds only, so
it can stop without waiting for the others, and for the outcome that is Holm's first rejection,
which is all that matters, since the benchmark stops at its first critical FAIL.

Why this and not an always-valid confidence sequence or a mixture SPRT: those need a likelihood
or a sub-Gaussian bound for the statistic, and the gate's statistics (bootstrap ratios of means
and percentiles, random effects between rounds) have neither in closed form; their z statistics
are close to Gaussian with the accumulating-data correlation, which is what the boundaries need,
and ``scripts/bench/gate_sim.py --sequential`` measures the error rates that result.
rho = 2 and nothing spent at the first look: one round has no spread between rounds (and a
run-level figure no noise estimate at all), so an early round that happens to run slow cannot
decide; most of alpha is left for the late looks, where the samples are.

A point stops when every gated check on it is PASS or FAIL (from its second round on), at its
cap (K rounds), when ``benchmark.budget_minutes`` would be exceeded by its next round, or when a
critical check anywhere FAILs (the whole benchmark stops: the candidate is rolled back sooner).
By default (``order: points``) each point runs until it stops, in the blueprint's order, so the
points listed first (the most requests per minute: high concurrency, short prompts) decide
first and a clear FAIL ends the benchmark early; ``order: rounds`` runs round 1 of every point,
then round 2, spreading slow drift over the points at the price of later decisions.
A blueprint without ``benchmark.sequential`` runs its repeats at full length, as before; the
budget still holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from blueprints.schema import BenchmarkSpec, GateSpec, Scenario
from tasks.planning.bench_baseline import Baseline
from tasks.planning.gate import GateReport, Looks, PointStop, Verdict, blocks_of, evaluate_gate, expected_points
from tasks.planning.bench_stats import betainc
from tasks.planning.group_sequential import nominal_levels
from tasks.planning.metrics import ScenarioSummary
from tasks.planning.ttft_probe import Probes, judged_on_probe

MIN_ROUNDS = 2

Point = tuple[str, int]


def levels(alpha: float, rounds: int, rho: float, first: int = MIN_ROUNDS) -> tuple[float, ...]:
    """Nominal one-sided level per look (1..rounds); nothing before ``first`` (at least
    ``MIN_ROUNDS``): the first look at which the point can be judged takes all that was due."""
    return nominal_levels(alpha, rounds, rho, max(first, MIN_ROUNDS))


def critical_family(bench: BenchmarkSpec, gate: GateSpec, baseline: Baseline | None) -> int:
    """How many critical checks the benchmark could make: an SLO check per point and limit set,
    and a check per bound of each gated critical rule at every point the baseline covers (a TTFT
    probe's point: its TTFT ones only)."""
    probes = {s.name for s in bench.scenarios if s.ttft_probe}

    def slos(scenario: str) -> int:
        return sum(getattr(gate.slo, f"{f}_ms") is not None and (scenario not in probes or judged_on_probe(f))
                   for f in ("ttft", "tpot", "e2e"))

    def bounds(scenario: str) -> int:
        return sum((r.max_ratio is not None) + (r.min_ratio is not None) for r in gate.rules
                   if r.critical and not r.report_only and (scenario not in probes or judged_on_probe(r.metric)))

    points = expected_points(bench)
    covered = [s for s, c in points if baseline is not None and baseline.lookup(s, c) is not None]
    return max(1, sum(slos(s) for s, _ in points) + sum(bounds(s) for s in covered))


def looks_of(stops: tuple[PointStop, ...], family: int) -> Looks:
    """The levels each point is judged at, from how it stopped; a point measured for fewer than
    ``MIN_ROUNDS`` rounds (the budget or a FAIL elsewhere cut it) is not judged: one round has no
    spread between rounds."""
    measured = [st for st in stops if st.rounds]
    short = {(st.scenario, st.concurrency): f"only {st.rounds} round measured (a sequential point is judged "
                                             f"from round {MIN_ROUNDS} on)" for st in measured if st.rounds < MIN_ROUNDS}
    return Looks({(st.scenario, st.concurrency): st.alpha for st in measured},
                 {(st.scenario, st.concurrency): st.alpha_critical for st in measured}, family, short)


@dataclass(frozen=True)
class Round:
    """One load run to make: a round of a point (a repeat, without ``benchmark.sequential``)."""

    scenario: Scenario
    concurrency: int
    index: int                        # 0-based
    duration_s: float
    max_requests: int
    warmup_requests: int

    @property
    def point(self) -> Point:
        return self.scenario.name, self.concurrency


@dataclass(frozen=True)
class Look:
    decided: bool
    failed: bool                      # a critical check FAILed: the benchmark stops
    report: GateReport


def errors_beyond(failed: int, requests: int, ceiling: float) -> float:
    """P(at least ``failed`` errors in ``requests``) for a true error rate at the ceiling
    (binomial upper tail, I_p(k, n - k + 1)): the p-value of "the rate is above the ceiling"."""
    if failed <= 0:
        return 1.0
    if ceiling <= 0:
        return 0.0
    return betainc(failed, requests - failed + 1, ceiling)


def look(summary: ScenarioSummary, baseline: Baseline | None, gate: GateSpec, alpha: float, critical: float,
         family: int, seed: int, final: bool, probes: Probes = Probes()) -> Look:
    """Judge one point on its rounds so far at this look's nominal levels."""
    point = (summary.scenario, summary.concurrency)
    report = evaluate_gate([summary], baseline, gate, seed=seed,
                           looks=Looks({point: alpha}, {point: critical}, family), probes=probes)
    gated = [r for r in report.rows if r.gated and r.verdict is not None]
    errors_clear = errors_beyond(summary.failed, summary.requests, gate.max_error_rate) < critical

    def settled(r) -> bool:
        # A figure without a noise estimate "stands" only when no more rounds will come; an error
        # rate over the ceiling is a fact at the end, and before it only when the ceiling is
        # exceeded beyond chance at this look's level (the rate of a partial run wanders).
        stands = r.check in ("slo", "ratio") and r.p_value is None and r.verdict is not Verdict.INCONCLUSIVE
        if r.check == "errors" and r.verdict is Verdict.FAIL and not final:
            return errors_clear
        return r.verdict in (Verdict.PASS, Verdict.FAIL) and (final or not stands)

    failed = any(r.verdict is Verdict.FAIL and r.critical and settled(r) for r in gated)
    return Look(failed or all(settled(r) for r in gated), failed, report)


@dataclass
class Schedule:
    """Which round to run next, and what each one decided. By default (``order: points``) each
    point runs until it is decided, so a clear FAIL ends the benchmark at the first point that
    shows it; ``order: rounds`` goes round 1 of every point, then round 2 of those still open,
    spreading slow drift over the points. Without ``benchmark.sequential``, repeats outermost."""

    bench: BenchmarkSpec
    gate: GateSpec
    baseline: Baseline | None
    seed: int = 0
    probes: Probes = Probes()        # the TTFT probes (``tasks.planning.ttft_probe``), judged as the gate will
    _order: list[tuple[Scenario, int]] = field(init=False)
    _stops: dict[Point, PointStop] = field(init=False, default_factory=dict)
    _rounds: dict[Point, int] = field(init=False, default_factory=dict)
    _load: dict[Point, float] = field(init=False, default_factory=dict)
    _alpha: dict[Point, tuple[float, float]] = field(init=False, default_factory=dict)
    _first: dict[Point, int] = field(init=False, default_factory=dict)   # a point's first look that can judge it
    family: int = field(init=False)

    def __post_init__(self) -> None:
        self._order = [(s, c) for s in self.bench.scenarios for c in s.concurrencies]
        self.family = critical_family(self.bench, self.gate, self.baseline)

    def _levels(self, k: int, first: int) -> tuple[float, float]:
        """Look k's nominal levels (checks and intervals; critical checks), for a point first
        judged at look ``first``. A point that stops before it is judged once, at that look's levels."""
        seq, alpha = self.bench.sequential, 1.0 - self.gate.confidence
        first = max(first, MIN_ROUNDS)
        k = max(k, first)
        return (levels(alpha, self.rounds, seq.spending, first)[k - 1],  # type: ignore[union-attr]
                levels(alpha / self.family, self.rounds, seq.spending, first)[k - 1])  # type: ignore[union-attr]

    @property
    def sequential(self) -> bool:
        return self.bench.sequential is not None

    @property
    def rounds(self) -> int:
        return self.bench.sequential.rounds if self.bench.sequential else self.bench.repeats

    @property
    def load_s(self) -> float:
        return sum(self._load.values())

    def _round_of(self, scenario: Scenario, concurrency: int, index: int) -> Round:
        if not self.sequential:
            return Round(scenario, concurrency, index, scenario.duration_s, scenario.max_requests,
                         scenario.warmup_requests)
        k = self.rounds
        return Round(scenario, concurrency, index, scenario.duration_s / k, -(-scenario.max_requests // k),
                     scenario.warmup_requests if index == 0 else 0)  # the engines stay warm between rounds

    def _next_point(self) -> tuple[Scenario, int, int] | None:
        """The open point to measure next and its round index: the first open point until it is
        decided (``order: points``), else the first of those with the fewest rounds so far."""
        open_ = [(s, c, self._rounds.get((s.name, c), 0)) for s, c in self._order if (s.name, c) not in self._stops]
        if not open_:
            return None
        if self.bench.sequential is not None and self.bench.sequential.order == "points":
            return open_[0]
        fewest = min(k for _, _, k in open_)  # a point is stopped at its last round, so fewest < rounds
        return next(p for p in open_ if p[2] == fewest)

    def next(self) -> Round | None:
        """The next round to measure; None when the benchmark is over."""
        found = self._next_point()
        if found is None:
            return None
        scenario, concurrency, index = found
        rnd = self._round_of(scenario, concurrency, index)
        budget = self.bench.budget_minutes
        if budget is not None and self.load_s + rnd.duration_s > budget * 60.0:
            self._stop_open("budget", f"not measured further: its next round ({rnd.duration_s:.0f} s) would take the "
                                      f"benchmark past its budget of {budget:.3g} min")
            return None
        return rnd

    def record(self, rnd: Round, summary: ScenarioSummary, load_s: float) -> Look | None:
        """What the round measured (``summary``: every round of the point so far, pooled)."""
        point = rnd.point
        k = self._rounds[point] = self._rounds.get(point, 0) + 1
        self._load[point] = self._load.get(point, 0.0) + load_s
        final = k >= self.rounds
        if not self.sequential:
            if final:
                self._stop(point, "cap", "every repeat measured")
            return None
        # A look spends alpha only where it can judge the point: from its second round on (one
        # round has no spread between rounds: an early slow one must not decide), and once it has
        # min_samples blocks (a look before that could only be INCONCLUSIVE, and the alpha it
        # spent would be lost to the later looks). Sample counts do not depend on the verdict, so
        # choosing the first look by them keeps the levels valid.
        if point not in self._first and blocks_of(summary.completed, summary.concurrency) >= self.gate.min_samples:
            self._first[point] = max(k, MIN_ROUNDS)
        first = self._first.get(point, self.rounds)
        alpha, critical = self._alpha[point] = self._levels(k, first)
        if k < first and not final:
            return None
        seen = look(summary, self.baseline, self.gate, alpha, critical, self.family, self.seed, final, self.probes)
        if seen.failed:
            self._stop(point, "decided", f"a critical check FAILed at round {k}")
            where = f"{point[0]} @ concurrency {point[1]}"
            self._stop_open("stopped", f"stopped: a critical check FAILed at {where}, so the benchmark ended there")
        elif seen.decided:
            self._stop(point, "decided", f"every check decided at round {k}")
        elif final:
            self._stop(point, "cap", f"its cap of {rnd.scenario.duration_s:g} s ({k} rounds) reached undecided")
        return seen

    def _stop(self, point: Point, reason: str, note: str) -> None:
        alpha, critical = self._alpha.get(point, (0.0, 0.0))
        self._stops[point] = PointStop(point[0], point[1], self._rounds.get(point, 0), self._load.get(point, 0.0),
                                       reason, alpha, critical, note)

    def _stop_open(self, reason: str, note: str) -> None:
        for s, c in self._order:
            if (s.name, c) not in self._stops:
                self._stop((s.name, c), reason, note)

    @property
    def stops(self) -> tuple[PointStop, ...]:
        """Every point's stop, in the blueprint's order (without ``benchmark.sequential``: those the
        budget cut short)."""
        return tuple(st for s, c in self._order if (st := self._stops.get((s.name, c))) is not None
                     and (self.sequential or st.reason == "budget"))

    @property
    def looks(self) -> Looks | None:
        if not self.sequential:
            return None
        return looks_of(self.stops, self.family)
