"""Synthetic load-generator records with known latencies, for the metrics and gate tests."""

from __future__ import annotations

import random

from blueprints.schema import GateRule, GateSpec, SloSpec
from tasks.planning.metrics import RequestRecord, ScenarioSummary, summarize


def record(ttft_s: float, tpot_s: float, tokens: int, *, send_ts: float = 100.0, scenario: str = "isl-3k",
           concurrency: int = 8, repeat: int = 0, error: str | None = None) -> RequestRecord:
    """A request whose tokens arrive one per chunk: first after ttft_s, then every tpot_s."""
    if error is not None:
        return RequestRecord(scenario, concurrency, repeat, send_ts, None, (), send_ts + 0.5, 3000, 0, error)
    first = send_ts + ttft_s
    chunks = tuple(first + i * tpot_s for i in range(tokens))
    return RequestRecord(scenario, concurrency, repeat, send_ts, first, chunks, chunks[-1] + 0.001, 3000, tokens)


def run(n: int, *, seed: int, ttft_ms: float = 120.0, tpot_ms: float | tuple[float, ...] = 12.0, tokens: int = 16,
        spread: float = 0.1, repeats: int = 1, errors: int = 0, scenario: str = "isl-3k",
        concurrency: int = 8, saturated: bool = False, slo: SloSpec = SloSpec()) -> ScenarioSummary:
    """n requests per repeat with log-normally spread TTFT and TPOT around the given medians.

    ``tpot_ms`` may give one median per repeat.
    """
    rng = random.Random(seed)
    tpots = tpot_ms if isinstance(tpot_ms, tuple) else (tpot_ms,) * repeats
    records = []
    for k in range(repeats):
        for i in range(n):
            if i < errors:
                records.append(record(0, 0, 0, error="HTTP 500", repeat=k, scenario=scenario,
                                      concurrency=concurrency))
                continue
            records.append(record(ttft_ms / 1000 * rng.lognormvariate(0, spread),
                                  tpots[k] / 1000 * rng.lognormvariate(0, spread), tokens,
                                  send_ts=float(i), repeat=k, scenario=scenario, concurrency=concurrency))
    durations = {k: 60.0 for k in range(repeats)} if repeats > 1 else 60.0
    return summarize(records, durations, slo, client_saturated=saturated)


def gate_spec(*rules: GateRule, slo: SloSpec = SloSpec(), min_samples: int = 12, max_error_rate: float = 0.01,
              confidence: float = 0.95) -> GateSpec:
    return GateSpec(slo=slo, rules=list(rules) or [GateRule(metric="tpot_mean", max_ratio=1.10, critical=True)],
                    min_samples=min_samples, max_error_rate=max_error_rate, confidence=confidence)
