"""Robust outliers across nodes, NICs or pairs: the modified z-score 0.6745 * (x - median) / MAD.

The median absolute deviation ignores the very outliers it is hunting, so one bad node among
four still stands out (a plain z-score needs about ten samples; Azure's outlier_detection.md).
Two guards keep it honest on small fleets: fewer than three figures give no outliers, and the
MAD is floored at a small fraction of the median so that nodes within measurement noise of
each other (a 0.3% spread, which makes the MAD tiny) are not flagged.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from typing import Literal

MIN_SAMPLES = 3
MIN_MAD_FRACTION = 0.01  # spreads under 1% of the median are measurement noise
_CONSISTENCY = 0.6745  # makes the MAD comparable to a standard deviation for normal data


def robust_scores(values: Mapping[str, float], *,
                  min_mad_fraction: float = MIN_MAD_FRACTION) -> dict[str, float]:
    """Modified z-score per key; NaN and infinite figures get no score."""
    finite = {k: float(v) for k, v in values.items() if isinstance(v, (int, float)) and math.isfinite(v)}
    if len(finite) < MIN_SAMPLES:
        return {k: 0.0 for k in finite}
    med = statistics.median(finite.values())
    mad = statistics.median(abs(v - med) for v in finite.values())
    scale = max(mad, min_mad_fraction * abs(med))
    if scale == 0:
        return {k: 0.0 for k in finite}
    return {k: _CONSISTENCY * (v - med) / scale for k, v in finite.items()}


def outliers(values: Mapping[str, float], threshold: float,
             direction: Literal["low", "high"] = "low", *,
             min_mad_fraction: float = MIN_MAD_FRACTION) -> dict[str, float]:
    """Keys whose score is beyond ``threshold`` on the bad side, with their scores.

    'low' for bandwidths (slower than the rest is bad), 'high' for latencies.
    """
    scores = robust_scores(values, min_mad_fraction=min_mad_fraction)
    if direction == "low":
        return {k: s for k, s in scores.items() if s < -threshold}
    return {k: s for k, s in scores.items() if s > threshold}


def median(values: Mapping[str, float]) -> float | None:
    finite = [v for v in values.values() if math.isfinite(v)]
    return statistics.median(finite) if finite else None
