"""Group-sequential boundaries: how strict each look must be so that all looks together keep alpha.

Lan-DeMets alpha spending with the power family alpha(t) = alpha * t^rho (Jennison & Turnbull,
"Group Sequential Methods with Applications to Clinical Trials", 2000, ch. 7; Lan & DeMets,
Biometrika 70, 1983). Looks are equally spaced in information (rounds of equal length carry
about equal numbers of requests): t_k = k / K. Looks before ``first`` spend nothing (their share
waits for ``first``). At each look the boundary is found under the canonical joint distribution of
the z statistics of accumulating data, Z_k = S(t_k) / sqrt(t_k) with S a Brownian motion, so
corr(Z_j, Z_k) = sqrt(t_j / t_k): the chance of crossing at look k, having not crossed before, is
exactly what look k may spend. The density of S among the paths not yet stopped is carried
from look to look on a grid (Armitage, McPherson & Rowe, JRSS A 132, 1969), the same recursion
as R's ``ldbounds``/``gsDesign``. The result is per look a nominal one-sided level: a test at
look k rejects when its own p-value is below it. Pure; numpy only.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from tasks.planning.bench_stats import normal_sf

_STEP = 0.005      # grid step on the S scale
_SPAN = 12.0       # the grid covers +-12 standard deviations of S(1)


def spent(k: int, rounds: int, alpha: float, rho: float, first: int = 1) -> float:
    """alpha(t_k) = alpha * (k / rounds)^rho, nothing before look ``first``."""
    if k < first:
        return 0.0
    return alpha * (min(k, rounds) / rounds) ** rho


@lru_cache(maxsize=256)
def nominal_levels(alpha: float, rounds: int, rho: float, first: int = 1) -> tuple[float, ...]:
    """Per look (1..rounds), the nominal one-sided level; 0.0 where a look spends nothing."""
    grid = np.arange(-_SPAN, _SPAN + _STEP / 2, _STEP)
    density = None            # of S(t_{k-1}) on the paths not stopped yet (None: S(0) = 0)
    t_prev, out = 0.0, []
    for k in range(1, rounds + 1):
        t = k / rounds
        var = t - t_prev
        if density is None:
            mass = np.exp(-grid ** 2 / (2 * var)) / math.sqrt(2 * math.pi * var) * _STEP
        else:
            half = int(math.ceil(8 * math.sqrt(var) / _STEP))
            offsets = np.arange(-half, half + 1) * _STEP
            kernel = np.exp(-offsets ** 2 / (2 * var)) / math.sqrt(2 * math.pi * var) * _STEP
            mass = np.convolve(density, kernel, mode="same")
        share = spent(k, rounds, alpha, rho, first) - spent(k - 1, rounds, alpha, rho, first)
        if share <= 0:
            out.append(0.0)
        else:
            bound = _upper_bound(grid, mass, share)
            out.append(min(alpha, normal_sf(bound / math.sqrt(t))))
            mass = np.where(grid < bound, mass, 0.0)
        density, t_prev = mass, t
    return tuple(out)


def _upper_bound(grid: np.ndarray, mass: np.ndarray, share: float) -> float:
    """b with (the mass above b) = share, interpolated; each grid point's mass spreads over its cell."""
    above = np.cumsum(mass[::-1])[::-1]          # above[i]: the mass from grid[i] - step/2 on
    i = int(np.searchsorted(-above, -share))     # first index whose mass beyond is <= share
    if i <= 0:
        return float(grid[0])
    if i >= len(grid):
        return float(grid[-1])
    hi, lo = above[i - 1], above[i]              # hi > share >= lo
    frac = (hi - share) / (hi - lo) if hi > lo else 0.0
    return float(grid[i - 1] - _STEP / 2 + frac * _STEP)
