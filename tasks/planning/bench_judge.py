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
    margin: float             # how far a violation that is not significant may reach and still PASS
    relative: bool            # True: the limit is on candidate / baseline

    @classmethod
    def max_ratio(cls, r: float) -> "Bound":
        # The margin allows the rule's own slack once more: 1.05 -> 1.10; none for r <= 1.
        return cls(r, True, r + max(r - 1.0, 0.0), True)

    @classmethod
    def min_ratio(cls, r: float) -> "Bound":
        return cls(r, False, r - max(1.0 - r, 0.0), True)

    @classmethod
    def slo(cls, limit_ms: float) -> "Bound":
        # An SLO is a contract: no margin beyond it.
        return cls(limit_ms, True, limit_ms, False)

    def violated(self, x: float) -> bool:
        return x > self.limit if self.higher_is_worse else x < self.limit

    def beyond_margin(self, x: float) -> bool:
        return x > self.margin if self.higher_is_worse else x < self.margin

    def text(self) -> str:
        op = "≤" if self.higher_is_worse else "≥"
        return f"{op} {self.limit:g}× baseline" if self.relative else f"{op} {self.limit:g} ms (SLO)"


def judge(bound: Bound, point: float, significant: bool, why_significant: str,
          ci: tuple[float, float] | None) -> tuple[Verdict, str]:
    """The verdict of one check; see gate.py for the rules in words.

    ``ci`` is the pair of one-sided bounds at the confidence; its end on the bad side must stay
    within the margin for a PASS, so a candidate as bad as the margin PASSes at most alpha of the
    time. Without an interval (one run of a run-level figure) the figure stands for itself.
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
    if bound.beyond_margin(far):
        return (Verdict.INCONCLUSIVE,
                f"{where}, and its {side} bound {fmt(far)} reaches beyond the margin {fmt(bound.margin)}: "
                "too few samples or too much noise to tell")
    return Verdict.PASS, f"{where}; its {side} bound {fmt(far)} stays within the margin {fmt(bound.margin)}"
