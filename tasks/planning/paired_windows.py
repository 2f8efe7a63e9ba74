"""A paired load point's records split into windows, and the paired gate's checks. Pure.

Both colours' records of one paired round (``loadgen.run_pair``) share one clock. Their common
measured span (the later of the two starts to the earlier of the two ends) is split into equal
windows; a completed request belongs to the window it was sent in. Per window and family the
sums and counts of each colour's values are what ``gate_paired.jackknife`` reads.

A window must be long against one request: requests in flight together share batch steps, and a
window shorter than a few of them is correlated with its neighbours, which the jackknife would
take as independent (gate_sim measured P(PASS | at the margin) 7.7% instead of 5% with 20 s
windows of 28 s requests). So a window is at least ``REQUEST_TIMES`` mean end-to-end times of the
round's requests, whatever ``gate.paired.window_s`` asks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from blueprints.schema import BenchmarkSpec, PairedGateSpec
from tasks.planning.gate_paired import Check, Point, WindowSums
from tasks.planning.metrics import RequestRecord

FAMILIES = ("ttft", "tpot")
REQUEST_TIMES = 3.0


@dataclass(frozen=True)
class Span:
    """A colour's measured window in one round: its start and length (``time.perf_counter`` s)."""

    start: float
    length: float

    @classmethod
    def of(cls, records: Sequence[RequestRecord], length: float) -> "Span | None":
        """The span from the first measured send, ``length`` long (the load result's duration)."""
        sends = [r.send_ts for r in records]
        return cls(min(sends), length) if sends else None

    @property
    def end(self) -> float:
        return self.start + self.length


@dataclass(frozen=True)
class Split:
    windows: dict[str, tuple[WindowSums, ...]]     # family -> windows of this round
    window_s: float                                # the length used
    span_s: float                                  # the common span split


def _value(record: RequestRecord, family: str) -> float | None:
    return record.ttft_s if family == "ttft" else record.tpot_s


def window_length(candidate: Sequence[RequestRecord], baseline: Sequence[RequestRecord], asked_s: float) -> float:
    """``asked_s``, widened to ``REQUEST_TIMES`` mean end-to-end times of the round's requests."""
    e2e = [r.e2e_s for r in (*candidate, *baseline) if r.completed and r.e2e_s is not None]
    return max(asked_s, REQUEST_TIMES * math.fsum(e2e) / len(e2e)) if e2e else asked_s


def split(candidate: Sequence[RequestRecord], candidate_span: Span | None, baseline: Sequence[RequestRecord],
          baseline_span: Span | None, asked_s: float) -> Split:
    """One round's windows per family; none when the colours' spans do not overlap by one window."""
    if candidate_span is None or baseline_span is None:
        return Split({f: () for f in FAMILIES}, asked_s, 0.0)
    start, end = max(candidate_span.start, baseline_span.start), min(candidate_span.end, baseline_span.end)
    length = window_length(candidate, baseline, asked_s)
    count = int((end - start) // length) if end > start else 0
    if count < 1:
        return Split({f: () for f in FAMILIES}, length, max(0.0, end - start))
    width = (end - start) / count      # the whole common span, in equal windows

    def sums(family: str) -> tuple[WindowSums, ...]:
        acc = [[0.0, 0, 0.0, 0] for _ in range(count)]
        for side, records in ((0, candidate), (2, baseline)):
            for r in records:
                value = _value(r, family) if r.completed else None
                if value is None or not start <= r.send_ts < end:
                    continue
                k = min(count - 1, int((r.send_ts - start) // width))
                acc[k][side] += value
                acc[k][side + 1] += 1
        return tuple(WindowSums(*row) for row in acc)

    return Split({f: sums(f) for f in FAMILIES}, width, end - start)


def windows_planned(duration_s: float, looks: int, window_s: float, e2e_s: float) -> int:
    """The windows a point's ``duration_s`` yields in ``looks`` rounds when its requests take
    ``e2e_s`` end to end (what ``split`` cuts, before ramps and the end of a round shorten it)."""
    return looks * math.floor(duration_s / looks / max(window_s, REQUEST_TIMES * e2e_s) + 1e-9)


def point_key(point: Point) -> str:
    return f"{point[0]}@{point[1]}"


def checks(spec: PairedGateSpec, benchmark: BenchmarkSpec) -> tuple[Check, ...]:
    """The contracts (each family over every point, weighted as the blueprint fixed) and, with
    ``spec.guard``, a guard per scenario and family over that scenario's points. A scenario with
    one point and one scenario in all add nothing a contract does not check already. A TTFT probe's
    points (``Scenario.ttft_probe``) weigh in the TTFT contract and guard only: a few tokens give
    no TPOT to speak of."""
    out: list[Check] = []
    for family, margin in spec.contracts.items():
        points = [(s.name, c) for s in benchmark.scenarios if family == "ttft" or not s.ttft_probe
                  for c in s.concurrencies]
        if not points:
            continue   # every point a probe: no contract for this family (validate refuses it)
        scenarios = list(dict.fromkeys(s for s, _ in points))
        stated = spec.weights.get(family, {})
        weights = {p: stated.get(point_key(p), 1.0) for p in points}
        out.append(Check(family, family, margin, weights))
        if spec.guard is None or len(scenarios) < 2:
            continue
        for scenario in scenarios:
            mine = {p: w for p, w in weights.items() if p[0] == scenario}
            out.append(Check(f"{family} @ {scenario}", family, spec.guard, mine, kind="guard"))
    return tuple(out)
