"""One gate check: a value against a bound, with noise taken into account (see gate.py for the rules).

A ``Bound`` is either a ratio bound (candidate / baseline, from a GateRule's max_ratio or
min_ratio) or an absolute SLO bound (milliseconds). ``judge`` turns the pooled point estimate,
the significance of a violation, the confidence interval and the per-repeat values into a
verdict with a one-line reason.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
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
          ci: tuple[float, float] | None, repeats: Sequence[float]) -> tuple[Verdict, str]:
    """The verdict of one check; see gate.py for the rules in words."""
    if not bound.violated(point):
        verdict, reason = Verdict.PASS, f"{fmt(point)} within {bound.text()}"
    elif significant:
        verdict, reason = Verdict.FAIL, f"{fmt(point)} breaks {bound.text()}; {why_significant}"
    else:
        far = point if ci is None else (ci[1] if bound.higher_is_worse else ci[0])
        if bound.beyond_margin(far):
            verdict = Verdict.INCONCLUSIVE
            reason = (f"{fmt(point)} breaks {bound.text()} but not significantly ({why_significant}), "
                      f"and {fmt(far)} is beyond the margin {fmt(bound.margin)}")
        else:
            verdict = Verdict.PASS
            reason = (f"{fmt(point)} breaks {bound.text()} only within noise ({why_significant}); "
                      f"{fmt(far)} stays within the margin {fmt(bound.margin)}")
    if len(repeats) < 2:
        return verdict, reason
    # The verdict must hold across repeats (like Argo's failureLimit absorbing one noisy run).
    violating = sum(1 for r in repeats if bound.violated(r))
    if verdict is Verdict.FAIL and violating * 2 <= len(repeats):
        return Verdict.INCONCLUSIVE, f"{reason}; but only {violating} of {len(repeats)} repeats break it"
    if verdict is Verdict.PASS:
        wild = [r for r in repeats if bound.beyond_margin(r)]
        if wild:
            return (Verdict.INCONCLUSIVE,
                    f"{reason}; but {len(wild)} of {len(repeats)} repeats reach beyond {fmt(bound.margin)} "
                    f"({', '.join(fmt(r) for r in wild)})")
    return verdict, reason
