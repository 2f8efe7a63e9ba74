"""The paired gate: both colours under one request stream at once, judged per window. Pure.

When both colours are live (a fleet swap, the migration against the service it replaces), the
load generator sends the same request stream to both, and splits each point's measured time into
short windows. Whatever drifts in common within a window (the client's machine, the network, the
hour's traffic) moves both colours' figures together and cancels in their ratio; measuring one
colour after the other, as a recorded baseline must, leaves it in. The study behind this design
(gate-decides, 2026-12) measured a 5% margin decided in about 42 minutes of load this way, against
a margin of 6.5% at best against a recorded baseline in the same time.

- A point's statistic for a metric family (TTFT, TPOT) is log(mean_c / mean_b) over its windows'
  pooled sums (a ratio of means, not a mean of per-window ratios, so a window with few requests
  weighs what it holds). Its standard error is the jackknife over windows: each window left out
  in turn (Efron & Tibshirani, "An Introduction to the Bootstrap", 1993, ch. 11), read with
  Student's t at W - 1 degrees of freedom, and widened where neighbouring windows move together.
  Windows are the independent units only when no batch of requests in flight spans two of them
  (a window drained at its end). Cut by time, a boundary cuts through a batch, whose shared batch
  steps then move both neighbours alike; a window is at least 3 requests' time long, so only
  neighbours share one, and windows of different rounds share none. Taken as independent, such
  windows read the standard error too low, so the jackknife variance is widened by their lag-1
  autocovariance, clipped at 0 (``_neighbour_inflation``). gate_sim, the reference blueprint's
  design, 4000 draws: P(PASS | at the margin) 5.1% plain, 4.3% widened, 4.2% plain with a drain
  after each window (default noise); the price, P(PASS | equal) 90.2% -> 87.3% (pessimistic noise).
- A contract is one family pooled over the points: a fixed-weight mean of the points' log ratios
  (weights chosen before the run, from the plan: inverse projected variance, so the load goes
  where the information is), its variance the weighted sum of theirs, its degrees of freedom
  Welch-Satterthwaite's. A guard is the same over one scenario's points (one input length), at a
  wider margin, so a regression at long contexts alone cannot hide in the pooled figure.
- A check with margin r PASSes when the upper bound of its ratio at the look's level is at most
  r, FAILs when its lower bound at the look's FAIL level is above r (significantly worse than
  the margin), and is undecided otherwise (``bench_judge.RATIO_RULE``).
- Levels: every check must PASS for the gate to PASS (an intersection-union test: each at alpha
  keeps the chance of passing a candidate at the margin at alpha); any FAIL fails the gate, so
  the FAIL side splits alpha over the m checks (Bonferroni). Looks are group-sequential with the
  power-family spending of ``tasks.planning.group_sequential`` on both sides.
- At the last look a check still undecided leaves the gate undecided: ``gate.undecided`` then
  rolls the candidate back (or asks a person).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from tasks.planning.bench_judge import Verdict
from tasks.planning.bench_stats import t_quantile
from tasks.planning.group_sequential import nominal_levels

Point = tuple[str, int]        # (scenario, concurrency)


@dataclass(frozen=True)
class WindowSums:
    """One window of one point for one metric family: each colour's sum of values and count."""

    candidate_sum: float
    candidate_n: int
    baseline_sum: float
    baseline_n: int


@dataclass(frozen=True)
class Estimate:
    log_ratio: float
    se: float
    df: float
    windows: int

    @property
    def ratio(self) -> float:
        return math.exp(self.log_ratio)

    def bounds(self, alpha_upper: float, alpha_lower: float) -> tuple[float, float]:
        """(lower bound at 1 - alpha_lower, upper bound at 1 - alpha_upper), as ratios."""
        return (math.exp(self.log_ratio - _t(alpha_lower, self.df) * self.se),
                math.exp(self.log_ratio + _t(alpha_upper, self.df) * self.se))


def _t(alpha: float, df: float) -> float:
    """Student's t quantile at whole degrees of freedom, rounded down (a little conservative; a
    pooled check's Welch-Satterthwaite df is continuous, and the bisection costs 2 ms a call)."""
    if alpha <= 0.0:
        return math.inf
    return _t_whole(alpha, max(1, math.floor(df)))


@lru_cache(maxsize=4096)
def _t_whole(alpha: float, df: int) -> float:
    return t_quantile(1.0 - alpha, df)


def _log_ratio(c: float, nc: float, b: float, nb: float) -> float | None:
    if nc <= 0 or nb <= 0 or c <= 0 or b <= 0:
        return None
    return math.log((c / nc) / (b / nb))


def jackknife(windows: Sequence[WindowSums]) -> Estimate | None:
    """The point's log ratio of means over its windows and its jackknife standard error, widened
    where neighbouring windows are positively correlated (``_neighbour_inflation``), at W - 1
    degrees of freedom; None with fewer than 2 windows or a colour without values."""
    w = len(windows)
    c, nc = sum(x.candidate_sum for x in windows), sum(x.candidate_n for x in windows)
    b, nb = sum(x.baseline_sum for x in windows), sum(x.baseline_n for x in windows)
    whole = _log_ratio(c, nc, b, nb)
    if w < 2 or whole is None:
        return None
    left_out = [_log_ratio(c - x.candidate_sum, nc - x.candidate_n, b - x.baseline_sum, nb - x.baseline_n)
                for x in windows]
    if any(v is None for v in left_out):
        return None
    mean = math.fsum(left_out) / w  # type: ignore[arg-type]
    spread = [v - mean for v in left_out]  # type: ignore[operator]
    var = (w - 1) / w * math.fsum(d * d for d in spread)
    return Estimate(whole, math.sqrt(var * _neighbour_inflation(spread)), float(w - 1), w)


def _neighbour_inflation(spread: Sequence[float]) -> float:
    """1 + 2 max(0, r1): the factor on the jackknife variance for windows in time order, r1 the lag-1
    autocorrelation of their leave-one-out values' deviations from their mean (the same as of the
    pseudo-values W theta - (W - 1) theta_-i, which are those deviations times -(W - 1)).

    The jackknife variance is the pseudo-values' sum of squared deviations over W (W - 1): the lag-0
    term of their long-run variance, all of it for independent windows. With dependence reaching
    one window across and no further (a batch is shorter than a window), the long-run variance is
    the lag-0 term plus twice the lag-1 autocovariance, and nothing beyond: the truncated (uniform)
    kernel at the known length of the dependence, as Hansen & Hodrick took it for overlapping
    observations ("Forward Exchange Rates as Optimal Predictors of Future Spot Rates", J. Political
    Economy 88(5), 1980). Newey & West's Bartlett kernel at bandwidth 1 ("A Simple, Positive
    Semi-Definite, Heteroskedasticity and Autocorrelation Consistent Covariance Matrix",
    Econometrica 55(3), 1987) counts that lag-1 term once, not twice, which suits dependence of
    unknown reach, not this; gate_sim measured it leaving P(PASS | at the margin) at 4.6-5.1%.
    Either needs no more than the W >= 2 windows the plain jackknife needs, unlike a
    delete-2-adjacent block jackknife (Kuensch, Ann. Statist. 17(3), 1989); with 3 or fewer windows
    r1 <= 0: no widening.

    Clipped at 0: batches shared across a boundary only ever correlate neighbours positively, so a
    negative r1 is noise (a few windows' r1 is biased to about -1/W), and the kernel's variance
    could go below the plain one's, or below 0. Clipped, the factor is never below 1, and the
    degrees of freedom stay W - 1: with independent windows the plain jackknife's t(W - 1) interval
    holds its level (the level the looks assume), and the widened interval contains it whatever the
    data, so it holds its level too. With correlated neighbours the widening adds spread to the
    variance only upward, never making an interval narrower than the plain one. (The unclipped
    kernel's variance would be honest only at Satterthwaite's degrees of freedom for that quadratic
    form, about (W - 2) / 3; at the Bartlett kernel's milder 2 (W - 1) / 3, gate_sim measured P(PASS |
    equal) down by 4 points under ``--noise pessimistic`` and P(PASS | at the margin) no lower
    than plain.) Rounds' windows concatenated bring a few independent neighbour pairs into r1,
    which weigh nothing in the long-run variance either."""
    squares = math.fsum(d * d for d in spread)
    if squares <= 0.0:
        return 1.0
    lag1 = math.fsum(a * b for a, b in zip(spread, spread[1:]))
    return 1.0 + 2.0 * max(0.0, lag1 / squares)


def pooled(estimates: Mapping[Point, Estimate], weights: Mapping[Point, float]) -> Estimate | None:
    """The fixed-weight mean of the points' log ratios, its standard error and Welch-Satterthwaite
    degrees of freedom. A point without an estimate leaves the check without one: the weights
    were fixed before the run, and renormalising over what happened to be measured would let the
    data choose them."""
    if not weights or any(p not in estimates for p in weights):
        return None
    total = math.fsum(weights.values())
    parts = [(weights[p] / total, estimates[p]) for p in weights]
    theta = math.fsum(w * e.log_ratio for w, e in parts)
    variances = [(w * w * e.se * e.se, e.df) for w, e in parts]
    var = math.fsum(v for v, _ in variances)
    spread = math.fsum(v * v / df for v, df in variances if df > 0)
    df = var * var / spread if spread > 0 else min(e.df for _, e in parts)
    return Estimate(theta, math.sqrt(var), df, min(e.windows for _, e in parts))


@dataclass(frozen=True)
class Check:
    """A contract (one family over all its points) or a guard (one family over one scenario)."""

    name: str                          # e.g. "ttft", "ttft @ isl-120k"
    family: str                        # "ttft" | "tpot"
    margin: float                      # the ratio rule r: PASS needs the upper bound <= r
    weights: Mapping[Point, float]
    kind: str = "contract"             # contract | guard


@dataclass(frozen=True)
class CheckResult:
    check: Check
    estimate: Estimate | None
    verdict: Verdict | None            # None: undecided at this look
    lower: float | None                # ratio bound at this look's FAIL level
    upper: float | None                # ratio bound at this look's PASS level
    reason: str


def judge_check(check: Check, estimate: Estimate | None, alpha_pass: float, alpha_fail: float) -> CheckResult:
    if estimate is None:
        return CheckResult(check, None, None, None, None, "no estimate: a point has fewer than 2 windows")
    lower, upper = estimate.bounds(alpha_pass, alpha_fail)
    shown = f"{check.name} ratio {estimate.ratio:.3f} [{lower:.3f}, {upper:.3f}] over {estimate.windows}+ windows"
    if lower > check.margin:
        return CheckResult(check, estimate, Verdict.FAIL, lower, upper,
                           f"{shown}: significantly worse than {check.margin:g} (lower bound at level {alpha_fail:.2g})")
    if upper <= check.margin:
        return CheckResult(check, estimate, Verdict.PASS, lower, upper,
                           f"{shown}: within {check.margin:g} (upper bound at level {alpha_pass:.2g})")
    return CheckResult(check, estimate, None, lower, upper, f"{shown}: not yet shown within {check.margin:g}")


@dataclass(frozen=True)
class Levels:
    """Per look, the nominal one-sided level of the PASS side and of the FAIL side (split over
    the m checks)."""

    passing: tuple[float, ...]
    failing: tuple[float, ...]

    @classmethod
    def of(cls, alpha: float, looks: int, rho: float, checks: int) -> "Levels":
        return cls(nominal_levels(alpha, looks, rho, 1), nominal_levels(alpha / max(1, checks), looks, rho, 1))


@dataclass(frozen=True)
class LookResult:
    look: int                          # 1-based
    outcome: Verdict | None            # None: go on to the next look
    results: tuple[CheckResult, ...]


def look(checks: Sequence[Check], estimates: Mapping[str, Mapping[Point, Estimate]], levels: Levels,
         k: int) -> LookResult:
    """Judge every check at look k (1-based) from the points' estimates per family so far. At the
    last look an undecided gate is INCONCLUSIVE (``gate.undecided`` decides what that means)."""
    results = tuple(judge_check(c, pooled(estimates.get(c.family, {}), c.weights),
                                levels.passing[k - 1], levels.failing[k - 1]) for c in checks)
    final = k >= len(levels.passing)
    if any(r.verdict is Verdict.FAIL for r in results):
        return LookResult(k, Verdict.FAIL, results)
    if all(r.verdict is Verdict.PASS for r in results):
        return LookResult(k, Verdict.PASS, results)
    return LookResult(k, Verdict.INCONCLUSIVE if final else None, results)
