"""The two statistical tools of the promotion gate, in plain Python (no numpy/scipy dependency).

- ``mann_whitney_u``: one-sided Mann-Whitney U test. Normal approximation with tie correction
  and continuity correction, as ``scipy.stats.mannwhitneyu(method="asymptotic")``; exact
  (enumerating the U distribution) when there are no ties and both samples hold at most
  ``EXACT_MAX_N`` values, as scipy's exact method.
- ``bootstrap_ratio_ci``: a seeded percentile-bootstrap confidence interval of
  stat(candidate) / stat(baseline), where stat is the mean or a percentile and the baseline is
  either samples (resampled too) or a single published figure (held fixed). Above ``MAX_DRAW``
  values a side is resampled ``MAX_DRAW`` at a time and the deviations scaled by sqrt(m/n)
  (m-out-of-n bootstrap), which keeps a gate over pooled ITL gaps to about a second per row.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from tasks.planning.metrics import percentile_sorted

EXACT_MAX_N = 20
MAX_DRAW = 4000


def normal_sf(z: float) -> float:
    """P(Z > z) for a standard normal Z."""
    return 0.5 * math.erfc(z / math.sqrt(2.0))


@dataclass(frozen=True)
class MannWhitney:
    u: float          # U statistic of the first sample (pairs where it is larger, ties count 1/2)
    p_value: float    # one-sided, in the direction asked for
    method: str       # "exact" or "normal"


def _ranks(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Rank sum of x in the pooled sample (ties get their average rank) and sum(t^3 - t) over ties."""
    pooled = sorted([(v, 0) for v in x] + [(v, 1) for v in y])
    rank_sum_x, tie_term, i = 0.0, 0.0, 0
    while i < len(pooled):
        j = i
        while j + 1 < len(pooled) and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        t = j - i + 1
        avg_rank = (i + j) / 2.0 + 1.0
        rank_sum_x += avg_rank * sum(1 for k in range(i, j + 1) if pooled[k][1] == 0)
        tie_term += t ** 3 - t
        i = j + 1
    return rank_sum_x, tie_term


@lru_cache(maxsize=None)
def _u_counts(m: int, n: int) -> tuple[int, ...]:
    """How many of the C(m+n, m) orderings give each U (0..m*n) for samples of m and n values."""
    if m == 0 or n == 0:
        return (1,)
    # An ordering ends with an x (which beats all n y's) or with a y (which adds nothing).
    ends_x = _u_counts(m - 1, n)
    ends_y = _u_counts(m, n - 1)
    counts = [0] * (m * n + 1)
    for u, c in enumerate(ends_x):
        counts[u + n] += c
    for u, c in enumerate(ends_y):
        counts[u] += c
    return tuple(counts)


def mann_whitney_u(x: Sequence[float], y: Sequence[float], alternative: str = "greater") -> MannWhitney:
    """Test whether x tends to be larger (``"greater"``) or smaller (``"less"``) than y."""
    if alternative not in ("greater", "less"):
        raise ValueError(f"alternative must be 'greater' or 'less', got {alternative!r}")
    n1, n2 = len(x), len(y)
    if n1 == 0 or n2 == 0:
        raise ValueError("Mann-Whitney U needs values on both sides")
    rank_sum, tie_term = _ranks(x, y)
    u1 = rank_sum - n1 * (n1 + 1) / 2.0
    u = u1 if alternative == "greater" else n1 * n2 - u1
    if tie_term == 0 and max(n1, n2) <= EXACT_MAX_N:
        counts = _u_counts(n1, n2)
        tail = sum(counts[math.ceil(u - 1e-9):])
        return MannWhitney(u1, tail / math.comb(n1 + n2, n1), "exact")
    n = n1 + n2
    variance = n1 * n2 / 12.0 * ((n + 1) - tie_term / (n * (n - 1)))
    if variance <= 0:  # every value tied: no evidence either way
        return MannWhitney(u1, 1.0, "normal")
    z = (u - n1 * n2 / 2.0 - 0.5) / math.sqrt(variance)
    return MannWhitney(u1, normal_sf(z), "normal")


def statistic(values: Sequence[float], stat: str) -> float:
    """``"mean"`` or ``"pNN"`` (numpy-linear percentile) of the values."""
    if stat == "mean":
        return math.fsum(values) / len(values)
    return percentile_sorted(sorted(values), float(stat[1:]))


def _resampler(values: Sequence[float], stat: str, rng: random.Random):
    """A function drawing one bootstrap replicate of stat(values)."""
    n = len(values)
    m = min(n, MAX_DRAW)
    full = statistic(values, stat)
    shrink = math.sqrt(m / n)
    q = None if stat == "mean" else float(stat[1:])
    pool = list(values)

    def draw() -> float:
        sample = rng.choices(pool, k=m)
        value = sum(sample) / m if q is None else percentile_sorted(sorted(sample), q)
        return full + (value - full) * shrink

    return draw


def bootstrap_ratio_ci(candidate: Sequence[float], baseline: Sequence[float] | float, stat: str,
                       confidence: float, seed: int, resamples: int = 1000) -> tuple[float, float] | None:
    """Two-sided percentile-bootstrap interval of stat(candidate) / stat(baseline).

    ``baseline`` as a number is a fixed figure (only the candidate is resampled). Returns None
    when the ratio is undefined (empty candidate, or a baseline statistic of zero).
    """
    if not candidate:
        return None
    rng = random.Random(seed)
    draw_c = _resampler(candidate, stat, rng)
    if isinstance(baseline, (int, float)):
        fixed = float(baseline)
        draw_b = lambda: fixed  # noqa: E731 - a constant "replicate"
    elif baseline:
        draw_b = _resampler(baseline, stat, rng)
    else:
        return None
    ratios = []
    for _ in range(resamples):
        b = draw_b()
        if b != 0:
            ratios.append(draw_c() / b)
    if len(ratios) < resamples * 0.9:
        return None
    ratios.sort()
    alpha = 1.0 - confidence
    return (percentile_sorted(ratios, 100.0 * alpha / 2), percentile_sorted(ratios, 100.0 * (1 - alpha / 2)))
