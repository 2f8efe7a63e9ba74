"""The statistics of the promotion gate: one method per statistic, one level, seeded. Pure.

Every decision is one-sided at the gate's single level alpha = 1 - ``gate.confidence``, and each
interval end reported is a one-sided bound at ``confidence`` (so "the interval lies beyond the
bound" and "p < alpha" say the same thing):

- A mean or a percentile of a per-request latency, as a ratio to the baseline's (or, for an SLO,
  to the SLO): a bootstrap of that ratio. What is resampled is a *time block* of requests: as
  many consecutive requests (by send time) as the point's concurrency, the requests that shared
  batch steps and so moved together; an ITL gap is resampled with its request. The baseline's
  samples are resampled the same way; a published figure is held fixed. Repeats drift more than
  requests within a run vary, so when a side's per-repeat statistics spread wider than its
  bootstrap allows, their spread is its variance instead (random effects, ``_log_variance``),
  with Student's t at their degrees of freedom (Welch-Satterthwaite over the two sides).
  The decision uses the standard error of log(ratio), a normal interval on the log scale, which
  gives continuous p-values (a percentile count would floor them at 1/(B+1), too coarse for Holm).
- A run-level figure (a throughput) measured once per repeat: a one-sided Student t test of the
  repeats' ratios against the bound (``t_test``). A single run has no noise estimate.
- Several critical checks in one report: Holm's step-down over their p-values (``holm``), so the
  chance that any of them FAILs an equal candidate stays at alpha.

numpy does the resampling; a verdict is the same for the same seed on every platform.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tasks.planning.metrics import percentile_sorted


def normal_sf(z: float) -> float:
    """P(Z > z) for a standard normal Z."""
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def normal_quantile(p: float) -> float:
    """z with P(Z <= z) = p (bisection on erf: exact to 1e-12, no table needed)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    lo, hi = -40.0, 40.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if 1.0 - normal_sf(mid) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def statistic(values: Sequence[float], stat: str) -> float:
    """``"mean"`` or ``"pNN"`` (numpy-linear percentile) of the values."""
    if stat == "mean":
        return math.fsum(values) / len(values)
    return percentile_sorted(sorted(values), float(stat[1:]))


# --- windows of one run -------------------------------------------------------------------------

# A run is also kept as this many windows of its requests (consecutive in send order, whole time
# blocks), each window's mean one figure: a later gate against it reads its spread from them, as
# it reads repeats, when drift within the session spreads them wider than its bootstrap allows
# (gate-decides.md: "record baselines as >= 12 windows, not 3 repeats").
WINDOWS = 12


def window_means(values: Sequence[float], block: int = 1, count: int = WINDOWS) -> tuple[float, ...]:
    """The means of ``count`` consecutive windows of ``values`` (in send order), each a whole
    number of ``block``-request time blocks; () when the run has fewer blocks than windows."""
    block = max(1, int(block))
    n_blocks = -(-len(values) // block)
    if count < 2 or n_blocks < count:
        return ()
    edges = [min(len(values), (i * n_blocks // count) * block) for i in range(count + 1)]
    return tuple(math.fsum(values[a:b]) / (b - a) for a, b in zip(edges, edges[1:]))


# --- the time-block bootstrap -------------------------------------------------------------------


@dataclass(frozen=True)
class Blocks:
    """Per-request values in send order, grouped into the blocks that are resampled together.

    ``counts`` (values per request) groups a family with several values per request (ITL gaps);
    by default every value is one request. ``block`` requests make one block."""

    values: np.ndarray
    block_of_value: np.ndarray
    n_blocks: int
    block: int = 1                  # requests per block

    @classmethod
    def of(cls, values: Sequence[float], block: int = 1, counts: Sequence[int] = ()) -> "Blocks":
        vals = np.asarray(values, dtype=float)
        per_request = np.asarray(counts, dtype=int) if len(counts) else np.ones(len(vals), dtype=int)
        if per_request.sum() != len(vals):
            per_request = np.ones(len(vals), dtype=int)  # counts from another family: by value
        request_of_value = np.repeat(np.arange(len(per_request)), per_request)
        block_of_value = request_of_value // max(1, int(block))
        n_blocks = int(block_of_value.max()) + 1 if len(vals) else 0
        return cls(vals, block_of_value, n_blocks, max(1, int(block)))

    def stat(self, stat: str) -> float:
        return statistic(self.values.tolist(), stat)

    def replicates(self, stat: str, rng: np.random.Generator, resamples: int) -> np.ndarray:
        """``resamples`` bootstrap replicates of the statistic (blocks drawn with replacement)."""
        draws = rng.integers(0, self.n_blocks, size=(resamples, self.n_blocks))
        rows = (draws + np.arange(resamples)[:, None] * self.n_blocks).ravel()
        multiplicity = np.bincount(rows, minlength=resamples * self.n_blocks).reshape(resamples, self.n_blocks)
        if stat == "mean":
            sums = np.bincount(self.block_of_value, weights=self.values, minlength=self.n_blocks)
            counts = np.bincount(self.block_of_value, minlength=self.n_blocks).astype(float)
            with np.errstate(invalid="ignore", divide="ignore"):
                return (multiplicity @ sums) / (multiplicity @ counts)
        q = float(stat[1:]) / 100.0
        order = np.argsort(self.values, kind="stable")
        sorted_values, sorted_blocks = self.values[order], self.block_of_value[order]
        out = np.empty(resamples)
        for b in range(resamples):
            out[b] = _weighted_quantile(sorted_values, multiplicity[b][sorted_blocks], q)
        return out


def _weighted_quantile(sorted_values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """numpy's linear percentile of the array that repeats each value ``weight`` times."""
    cum = np.cumsum(weights)
    total = int(cum[-1]) if len(cum) else 0
    if total == 0:
        return math.nan
    h = q * (total - 1)
    lo, hi = math.floor(h), math.ceil(h)
    i_lo, i_hi = np.searchsorted(cum, [lo, hi], side="right")
    return float(sorted_values[i_lo] + (h - lo) * (sorted_values[i_hi] - sorted_values[i_lo]))


@dataclass(frozen=True)
class RatioTest:
    """The ratio, its one-sided bounds at the confidence, and the p-value of breaking a bound."""

    ratio: float
    se_log: float                   # bootstrap standard error of log(ratio); 0 when nothing varies
    method: str
    # Degrees of freedom when a side's variance is its repeats' spread (few repeats: Student's t,
    # Welch-Satterthwaite over the sides); None: the bootstrap's, a normal interval.
    df: float | None = None

    def _quantile(self, confidence: float) -> float:
        return normal_quantile(confidence) if self.df is None else t_quantile(confidence, self.df)

    def bounds(self, confidence: float) -> tuple[float, float]:
        z = self._quantile(confidence) * self.se_log
        return self.ratio * math.exp(-z), self.ratio * math.exp(z)

    def p_beyond(self, limit: float, higher_is_worse: bool) -> float:
        """P-value of "the true ratio is beyond ``limit``" (above a max bound, below a min bound)."""
        if self.ratio <= 0 or limit <= 0:
            return 1.0
        distance = math.log(self.ratio) - math.log(limit)
        distance = distance if higher_is_worse else -distance
        if self.se_log == 0:
            return 0.0 if distance > 0 else 1.0
        z = distance / self.se_log
        return normal_sf(z) if self.df is None else t_sf(z, self.df)


def satterthwaite(*sides: tuple[float, float | None]) -> float | None:
    """Welch-Satterthwaite degrees of freedom of a sum of variances, each (variance, df or None
    for a bootstrap's, taken as exact); None when every side is a bootstrap's."""
    if all(df is None for _, df in sides):
        return None
    total = sum(v for v, _ in sides)
    spread = sum(v * v / df for v, df in sides if df is not None)
    return total * total / spread if spread > 0 else None


def _log_variance(replicates: np.ndarray, repeats: Sequence[float]) -> tuple[float, float | None] | None:
    """The variance of one side's log statistic: its bootstrap's, or, when the repeats disagree
    more than that allows, the repeats' own spread (DerSimonian-Laird random effects with equal
    within-repeat variances: var = max(V, s^2 / k)). With it, the degrees of freedom: k - 1 when
    the repeats' spread won (s^2 from k values is itself noisy), None for the bootstrap's."""
    logs = np.log(replicates)
    logs = logs[np.isfinite(logs)]
    if len(logs) < 0.9 * len(replicates):
        return None
    within = float(np.var(logs, ddof=1)) if len(logs) > 1 else 0.0
    per_repeat = [math.log(r) for r in repeats if r > 0 and math.isfinite(r)]
    if len(per_repeat) < 2 or len(per_repeat) < len(repeats):
        return within, None
    between = float(np.var(per_repeat, ddof=1)) / len(per_repeat)
    return (between, float(len(per_repeat) - 1)) if between > within else (within, None)


@dataclass(frozen=True)
class Figure:
    """A published baseline figure with the uncertainty it was measured with: the variance of its
    log. A mean of n requests whose per-request coefficient of variation is cv has
    var(log mean) ~ cv^2 / n (delta method); a percentile q of n values has the asymptotic
    variance of a sample quantile, q(1 - q) / (n f(x_q)^2) (Serfling, "Approximation Theorems of
    Mathematical Statistics", 1980, 2.3.3), on the log scale with log-values near normal of sd cv:
    cv^2 q(1 - q) / (n phi(z_q)^2). A run-level figure (a throughput) measured once has the
    between-run variance cv^2."""

    value: float
    var_log: float
    # Degrees of freedom of var_log when it is itself estimated from a few repeats (Student's t,
    # Welch-Satterthwaite with the other side); None: stated, taken as known.
    df: float | None = None

    @classmethod
    def of(cls, value: float, stat: str, cv: float, n: int) -> "Figure":
        if stat == "run":
            return cls(value, cv * cv)
        if stat == "mean":
            return cls(value, cv * cv / n)
        q = float(stat[1:]) / 100.0
        z = normal_quantile(q)
        density = math.exp(-z * z / 2.0) / math.sqrt(2.0 * math.pi)
        return cls(value, cv * cv * q * (1.0 - q) / (n * density * density))


def bootstrap_ratio(candidate: Blocks, baseline: Blocks | Figure | float, stat: str, seed: int,
                    resamples: int = 1000, *, candidate_repeats: Sequence[float] = (),
                    baseline_repeats: Sequence[float] = (),
                    between: tuple[float, float | None] | None = None) -> RatioTest | None:
    """stat(candidate) / stat(baseline), bootstrapped over time blocks (a published figure adds
    the variance it was measured with, ``Figure``). The two sides are resampled independently, so var(log ratio) is the sum
    of theirs. ``*_repeats`` are each side's statistic per repeat (or per window of one run,
    ``window_means``): repeats drift (thermals, neighbours, a different batch mix), which
    resampling requests within a run cannot see, so a side whose repeats disagree more than its
    bootstrap allows takes their spread instead. ``between``: the variance of log(ratio) that two
    sessions of one build differ by beyond their own noise, and its degrees of freedom
    (``tasks.planning.aa_offsets``: the A/A offsets of unchanged redeploys), added when the
    baseline was measured in another session; nothing within one session can show it.

    None when the ratio is undefined (no candidate values, a zero or missing baseline, too few
    replicates with a defined statistic)."""
    if candidate.n_blocks == 0:
        return None
    if isinstance(baseline, (int, float)):  # an exact bound (an SLO)
        baseline = Figure(float(baseline), 0.0)
    fixed = isinstance(baseline, Figure)
    if not fixed and baseline.n_blocks == 0:  # type: ignore[union-attr]
        return None
    base_stat = baseline.value if fixed else baseline.stat(stat)  # type: ignore[union-attr]
    cand_stat = candidate.stat(stat)
    if base_stat <= 0 or cand_stat <= 0 or not (math.isfinite(base_stat) and math.isfinite(cand_stat)):
        return None
    rng = np.random.default_rng(seed)
    cand = _log_variance(candidate.replicates(stat, rng, resamples), candidate_repeats)
    base = (baseline.var_log, baseline.df) if fixed else _log_variance(  # type: ignore[union-attr]
        baseline.replicates(stat, rng, resamples), baseline_repeats)  # type: ignore[union-attr]
    if cand is None or base is None:
        return None
    side = ("the baseline's samples, resampled the same way" if not fixed else "a fixed figure"
            if baseline.var_log == 0 else  # type: ignore[union-attr]
            ("a recorded figure with the standard error of its repeats" if baseline.df is not None  # type: ignore
             else "a published figure with its own standard error")
            + f" ({math.sqrt(baseline.var_log):.2g} in log)")  # type: ignore[union-attr]
    method = (f"bootstrap of the {stat} ratio over {candidate.n_blocks} time blocks of {candidate.block} "
              f"request(s), against {side}")
    drifted = [who for who, (_, df) in (("candidate", cand), ("baseline", base)) if df is not None]
    sides = (cand, base) + ((between,) if between is not None else ())
    df = satterthwaite(*sides)
    if drifted:
        method += (f"; the {' and '.join(drifted)}'s repeats (or one run's windows) spread wider, so their spread is used "
                   f"(Student's t, {df:.3g} df)")
    if between is not None:
        method += (f"; plus the offset between sessions of one build ({math.sqrt(between[0]):.2g} in log, "
                   f"from {between[1]:.0f} A/A comparison(s))" if between[1] is not None else
                   f"; plus the offset between sessions of one build ({math.sqrt(between[0]):.2g} in log)")
    return RatioTest(cand_stat / base_stat, math.sqrt(sum(v for v, _ in sides)), method, df)


# --- repeats: Student's t ------------------------------------------------------------------------


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz, Numerical Recipes 6.4)."""
    tiny = 1e-300

    def guard(v: float) -> float:
        return v if abs(v) > tiny else tiny

    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 / guard(1.0 - qab * x / qap)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d, c = 1.0 / guard(1.0 + aa * d), guard(1.0 + aa / c)
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d, c = 1.0 / guard(1.0 + aa * d), guard(1.0 + aa / c)
        step = d * c
        h *= step
        if abs(step - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_sf(t: float, df: int) -> float:
    """P(T > t) for Student's t with ``df`` degrees of freedom."""
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


def t_quantile(p: float, df: int) -> float:
    """t with P(T <= t) = p (bisection)."""
    lo, hi = -1e4, 1e4
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if 1.0 - t_sf(mid, df) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


@dataclass(frozen=True)
class RepeatTest:
    mean: float
    sd: float
    n: int

    def bounds(self, confidence: float) -> tuple[float, float]:
        half = t_quantile(confidence, self.n - 1) * self.sd / math.sqrt(self.n)
        return self.mean - half, self.mean + half

    def p_beyond(self, limit: float, higher_is_worse: bool) -> float:
        distance = (self.mean - limit) if higher_is_worse else (limit - self.mean)
        if self.sd == 0:
            return 0.0 if distance > 0 else 1.0
        return t_sf(distance / (self.sd / math.sqrt(self.n)), self.n - 1)

    @property
    def method(self) -> str:
        return f"one-sided t test over {self.n} repeats"


def t_test(values: Sequence[float]) -> RepeatTest | None:
    """The repeats' mean and spread, for a one-sided test against a bound; None for one run."""
    if len(values) < 2:
        return None
    mean = math.fsum(values) / len(values)
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1))
    return RepeatTest(mean, sd, len(values))


def repeats_ratio(candidate: Sequence[float], baseline: Sequence[float] | Figure) -> RatioTest | None:
    """A run-level figure's ratio, candidate over baseline, from each side's repeats: a two-sample
    t test on the log scale against the baseline's own repeats (Welch; with one run on a side,
    the other side's spread stands for both, the pooled-variance test), or against a published
    figure with its between-run variance. Dividing the candidate's repeats by the baseline's
    pooled figure, as before, held the baseline exact: an equal candidate FAILed 8.8% of the time
    at a nominal 5% (3 repeats a side, CV 3%). None without a noise estimate on any side."""
    cand = [math.log(v) for v in candidate if v > 0 and math.isfinite(v)]
    if not cand or len(cand) < len(candidate):
        return None
    mean_c = math.fsum(cand) / len(cand)
    var_c = _sample_var(cand)
    if isinstance(baseline, Figure):
        if baseline.value <= 0:
            return None
        if var_c is None:  # one candidate run: the stated between-run spread stands for it too
            se2, df = 2.0 * baseline.var_log, baseline.df
        else:
            se2, df = var_c / len(cand) + baseline.var_log, satterthwaite((var_c / len(cand), len(cand) - 1.0),
                                                                          (baseline.var_log, baseline.df))
        where = "a published figure with its between-run spread"
        diff = mean_c - math.log(baseline.value)
    else:
        base = [math.log(v) for v in baseline if v > 0 and math.isfinite(v)]
        if not base or len(base) < len(baseline):
            return None
        var_b, mean_b = _sample_var(base), math.fsum(base) / len(base)
        diff = mean_c - mean_b
        if var_c is not None and var_b is not None:       # Welch
            se2 = var_c / len(cand) + var_b / len(base)
            df = satterthwaite((var_c / len(cand), len(cand) - 1.0), (var_b / len(base), len(base) - 1.0))
        elif var_c is not None or var_b is not None:      # one run on a side: one spread for both
            var, known = (var_c, len(cand)) if var_c is not None else (var_b, len(base))
            se2, df = var * (1.0 / len(cand) + 1.0 / len(base)), float(known - 1)  # type: ignore[operator]
        else:
            return None
        where = f"the baseline's {len(base)} repeats"
    method = f"t test of log figures over {len(cand)} candidate repeats against {where}"
    return RatioTest(math.exp(diff), math.sqrt(max(se2, 0.0)), method, df if df is not None else None)


def _sample_var(logs: Sequence[float]) -> float | None:
    if len(logs) < 2:
        return None
    mean = math.fsum(logs) / len(logs)
    return math.fsum((v - mean) ** 2 for v in logs) / (len(logs) - 1)


# --- several checks: Holm -------------------------------------------------------------------------


def holm(p_values: Mapping[object, float]) -> dict[object, float]:
    """Holm-adjusted p-values: reject those below alpha and the family-wise error rate is alpha."""
    ordered = sorted(p_values.items(), key=lambda kv: kv[1])
    m, running, out = len(ordered), 0.0, {}
    for rank, (key, p) in enumerate(ordered):
        running = max(running, min(1.0, (m - rank) * p))
        out[key] = running
    return out
