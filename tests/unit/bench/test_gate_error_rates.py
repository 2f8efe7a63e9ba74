"""The gate's error rates where its tests used to hold a baseline exact: measured over many draws
of a known truth, against the level the gate states (alpha = 0.05).

- A run-level figure (a throughput) is tested against the baseline's own repeats. Dividing the
  candidate's repeats by the baseline's pooled figure FAILed an equal candidate 8.8% of the time
  (3 repeats a side at a CV of 3%, min_ratio 1.0).
- A published figure carries the variance of its sample count and stated CV. Held exact, a
  figure drawn from 57 requests let a candidate as bad as the margin PASS far more often than
  alpha.
"""

from __future__ import annotations

import math
import random

from blueprints.schema import GateRule, SloSpec
from tasks.planning.bench_baseline import Baseline, BaselineEntry, baseline_from_summaries
from tasks.planning.gate import Verdict, evaluate_gate
from tasks.planning.metrics import summarize
from tests.unit.bench.helpers import gate_spec, record, run

DRAWS = 1000
# Monte Carlo: 1,000 draws of a 5% event have a standard error of 0.7 points; 6.5% is 2.2 of them
# above 5%, and the defects measured 8.8% and more.
CEILING = 0.065


def _runs(seed: int, repeats: int = 3, cv: float = 0.03):
    """Three repeats of 20 identical requests whose run durations spread with the given CV: the
    throughput per repeat varies by ``cv``, the per-request latencies not at all."""
    rng = random.Random(seed)
    records = [record(0.1, 0.01, 16, send_ts=float(i), repeat=k, concurrency=1) for k in range(repeats)
               for i in range(20)]
    durations = {k: 60.0 * math.exp(rng.gauss(0.0, cv)) for k in range(repeats)}
    return summarize(records, durations, SloSpec(), concurrency=1)


def test_an_equal_throughput_fails_and_passes_at_its_stated_rate_against_the_baselines_repeats():
    rule = GateRule(metric="output_tokens_per_s", min_ratio=1.0, critical=True)
    gate = gate_spec(rule, min_samples=20)
    verdicts = []
    for draw in range(DRAWS):
        base = baseline_from_summaries([_runs(2 * draw)], source="recorded")
        verdicts.append(evaluate_gate([_runs(2 * draw + 1)], base, gate).outcome)
    fails, passes = verdicts.count(Verdict.FAIL) / DRAWS, verdicts.count(Verdict.PASS) / DRAWS
    # An equal candidate is exactly at a min_ratio 1.0 rule: it FAILs alpha of the time (a false
    # FAIL), and PASSes alpha of the time (a candidate at the margin), both one-sided at 5%.
    assert 0.03 < fails <= CEILING and 0.03 < passes <= CEILING


def _published(value_ms: float, n: int, cv: float) -> Baseline:
    return Baseline("published", (BaselineEntry("isl-3k", 1, {"tpot_mean": value_ms}, n,
                                                cv={"ttft": cv, "tpot": cv}),))


def test_a_candidate_at_the_margin_of_a_published_figure_passes_at_most_alpha_of_the_time():
    rule = GateRule(metric="tpot_mean", max_ratio=1.10, critical=True)
    gate = gate_spec(rule, min_samples=12)
    sigma = 0.3
    cv = math.sqrt(math.exp(sigma ** 2) - 1.0)      # of a log-normal with that sigma
    passes = 0
    draws = DRAWS // 2
    for draw in range(draws):
        rng = random.Random(draw)
        # The published mean TPOT came from 57 requests of the true baseline (median 12 ms).
        figure = math.fsum(12.0 * rng.lognormvariate(0, sigma) for _ in range(57)) / 57
        candidate = run(300, seed=10_000 + draw, tpot_ms=12.0 * 1.10, spread=sigma, concurrency=1)
        report = evaluate_gate([candidate], _published(figure, 57, cv), gate, seed=draw, resamples=300)
        passes += report.outcome is Verdict.PASS
    # 500 draws: standard error 1 point at 5%; held exact, this PASSed about a third of the time.
    assert passes / draws <= 0.075
