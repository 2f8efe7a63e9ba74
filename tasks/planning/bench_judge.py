"""One gate check: a value against a bound, with noise taken into account (see gate.py for the rules).

A ``Bound`` is either a ratio bound (candidate / baseline, from a GateRule's max_ratio or
min_ratio) or an absolute SLO bound (milliseconds). ``judge`` turns the pooled point estimate,
the significance of a violation and the confidence interval into a verdict with a one-line
reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum


# What a ratio rule means, in one sentence, for the report, the docs and `pdlift validate`.
RATIO_RULE = ("A ratio rule r is the margin itself: a check PASSes when the one-sided bound of "
              "candidate/baseline on the bad side (at the gate's confidence) is within r, FAILs when the "
              "candidate is significantly worse than r, and is undecided otherwise.")


class Verdict(str, Enum):
    PASS = "PASS"
    FAIL = "FAIL"
    INCONCLUSIVE = "INCONCLUSIVE"


def fmt(value: float | None) -> str:
    """A number for people: a dash for None, a symbol for infinity, ratios to three decimals."""
    if value is None:
        return "—"
    if math.isinf(value):
        return "∞" if value > 0 else "-∞"
    if abs(value) >= 1000:
        return f"{value:.0f}"
    return f"{value:.4g}" if abs(value) >= 10 else f"{value:.3f}"


@dataclass(frozen=True)
class Bound:
    limit: float
    higher_is_worse: bool     # True: a max bound (latencies); False: a min bound (throughputs)
    relative: bool            # True: the limit is on candidate / baseline

    # The bound is also the margin (RATIO_RULE): nothing beyond it PASSes. (Before, a max ratio r
    # allowed r + (r - 1), so "<= 1.15x" PASSed a candidate whose upper bound was 1.30.)
    @classmethod
    def max_ratio(cls, r: float) -> "Bound":
        return cls(r, True, True)

    @classmethod
    def min_ratio(cls, r: float) -> "Bound":
        return cls(r, False, True)

    @classmethod
    def slo(cls, limit_ms: float) -> "Bound":
        return cls(limit_ms, True, False)

    def violated(self, x: float) -> bool:
        return x > self.limit if self.higher_is_worse else x < self.limit

    def text(self) -> str:
        op = "≤" if self.higher_is_worse else "≥"
        return f"{op} {self.limit:g}× baseline" if self.relative else f"{op} {self.limit:g} ms (SLO)"


def judge(bound: Bound, point: float, significant: bool, why_significant: str,
          ci: tuple[float, float] | None) -> tuple[Verdict, str]:
    """The verdict of one check; see gate.py for the rules in words.

    ``ci`` is the pair of one-sided bounds at the confidence; its end on the bad side must stay
    within the bound for a PASS (RATIO_RULE), so a candidate as bad as the bound PASSes at most
    alpha of the time. Without an interval (one run of a run-level figure) the figure stands for itself.
    """
    violated = bound.violated(point)
    if violated and significant:
        return Verdict.FAIL, f"{fmt(point)} breaks {bound.text()}; {why_significant}"
    if ci is None:
        return Verdict.PASS, f"{fmt(point)} within {bound.text()}"
    far = ci[1] if bound.higher_is_worse else ci[0]
    side = "upper" if bound.higher_is_worse else "lower"
    where = f"{fmt(point)} within {bound.text()}" if not violated else \
        f"{fmt(point)} breaks {bound.text()} but not significantly ({why_significant})"
    if bound.violated(far):
        return (Verdict.INCONCLUSIVE,
                f"{where}, and its {side} bound {fmt(far)} reaches beyond {fmt(bound.limit)}: "
                "too few samples or too much noise to tell")
    return Verdict.PASS, f"{where}; its {side} bound {fmt(far)} stays within {fmt(bound.limit)}"
