"""TTFT probes: load points whose requests ask for a tiny completion (``Scenario.ttft_probe``). Pure.

A probe fits many more TTFT samples in a minute than a full-length point (about 11x at 3k-token
prompts, 2-3x at 60k-120k), but says nothing about decoding: on a probe point the gate judges
TTFT only (its ratio rules on ``ttft_*``, the SLO on TTFT), with the error ceiling and
``min_samples``; TPOT, ITL, end-to-end and throughput rules are shown, not gated.

With PD disaggregation a probe measures production's path only if each request's KV went from
prefill to decode. So a probe point is judged only when the engines counted at least as many KV
transfers during it as it completed requests (``server_figures.TRANSFERS``). The count is a floor,
not an exact match: the warm-up and the requests that keep the concurrency up around the measured
window transfer too, and a connector may move one request's KV in several transfers; what it
catches is the failure it exists for, requests answered without a transfer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from blueprints.schema import Blueprint
from tasks.planning.metrics import ScenarioSummary, split_metric
from tasks.planning.server_figures import TRANSFERS, TransferCounter, transfer_counter

# What a probe point is judged on: its TTFT and its errors (a fact whatever the completion length).
_JUDGED = ("ttft", "error_rate")


@dataclass(frozen=True)
class Probes:
    """The benchmark's probe scenarios (name -> the completion tokens they ask for) and where the
    stack counts its KV transfers (None: nowhere, so no probe point can be judged)."""

    scenarios: Mapping[str, int] = field(default_factory=dict)
    counter: TransferCounter | None = None

    @classmethod
    def of(cls, bp: Blueprint) -> "Probes":
        return cls({s.name: s.output_tokens for s in bp.benchmark.scenarios if s.ttft_probe},
                   transfer_counter(bp.engine.name, bp.kv_transfer.connector))

    def __contains__(self, scenario: object) -> bool:
        return scenario in self.scenarios

    def __bool__(self) -> bool:
        return bool(self.scenarios)


def judged_on_probe(metric: str) -> bool:
    """Whether the gate judges ``metric`` on a probe point (``ttft_*``, the error rate)."""
    parts = split_metric(metric)
    return (parts[0] if parts else metric) in _JUDGED


def not_gated(metric: str) -> str:
    return f"TTFT probe: {metric} not gated"


def transfers_seen(s: ScenarioSummary) -> float | None:
    """The KV transfers counted during the point's repeats; None unless every repeat has a count."""
    parts = s.repeats or (s,)
    if not all(TRANSFERS in p.server for p in parts):
        return None
    return sum(p.server[TRANSFERS][0] for p in parts)


def transfer_blocker(s: ScenarioSummary, probes: Probes) -> str | None:
    """Why the probe point ``s`` cannot be judged (its KV transfers not shown), or None."""
    counter = probes.counter
    where = counter.count_name if counter else "the engines' transfer metrics"
    why = f"(max_tokens {probes.scenarios.get(s.scenario, '?')} may be answered by prefill alone)"
    count = transfers_seen(s)
    if count is None:
        missing = next((n for n in s.server_notes if n.startswith(TRANSFERS)), "no server metrics were read")
        return f"TTFT probe: no KV transfer count for the point in {where} ({missing})"
    if count < s.completed:
        return (f"TTFT probe: no KV transfer seen in {where} during the point {why}: {count:.0f} transfers for "
                f"{s.completed} completed requests")
    return None


def transfers_text(s: ScenarioSummary, probes: Probes) -> str:
    where = probes.counter.count_name if probes.counter else "the transfer metrics"
    return f"{transfers_seen(s) or 0:.0f} KV transfers in {where} for {s.completed} completed requests"
