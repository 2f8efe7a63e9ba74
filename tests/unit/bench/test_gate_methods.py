"""The gate's methods and boundaries: each statistic tested for itself, one level, Holm across the
critical checks, the margins, the repeats, and the edges of every threshold."""

from __future__ import annotations

import random

import pytest

from blueprints.schema import GateRule, SloSpec
from tasks.planning.bench_baseline import baseline_from_summaries
from tasks.planning.bench_judge import Bound, Verdict, judge
from tasks.planning.gate import evaluate_gate
from tasks.planning.metrics import summarize
from tests.unit.bench.helpers import gate_spec, record, run

TPOT = GateRule(metric="tpot_mean", max_ratio=1.10, critical=True)


def baseline_of(*summaries, **kw):
    return baseline_from_summaries(summaries, source="previous run", run_id="run-0", **kw)


def row(report, metric, check="ratio", scenario="isl-3k", concurrency=8):
    (found,) = [r for r in report.rows if (r.metric, r.check, r.scenario, r.concurrency) ==
                (metric, check, scenario, concurrency)]
    return found


def tailed(n: int, seed: int, tail_share: float = 0.10, tail_factor: float = 3.0, tpot_ms: float = 12.0,
           repeats: int = 1):
    """n requests whose TPOT is log-normal around tpot_ms, except a tail 3x slower: the median does
    not move, the mean does."""
    rng = random.Random(seed)
    records = []
    for k in range(repeats):
        for i in range(n):
            slow = rng.random() < tail_share
            tpot = tpot_ms / 1000 * rng.lognormvariate(0, 0.1) * (tail_factor if slow else 1.0)
            records.append(record(0.12 * rng.lognormvariate(0, 0.1), tpot, 16, send_ts=float(i), repeat=k))
    durations = {k: 60.0 for k in range(repeats)} if repeats > 1 else 60.0
    return summarize(records, durations, SloSpec())


# --- means are tested on means -----------------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_a_mean_regression_driven_by_a_slow_tail_fails(seed):
    base = run(600, seed=100 + seed, spread=0.1)
    candidate = tailed(600, seed=200 + seed)            # 10% of requests 3x slower: mean x1.15-1.2, median x1.0
    report = evaluate_gate([candidate], baseline_of(base), gate_spec(TPOT))
    tpot = row(report, "tpot_mean")
    assert candidate.tpot.p50 == pytest.approx(base.tpot.p50, rel=0.05)
    assert tpot.ratio > 1.13 and tpot.ci[0] > 1.10
    assert tpot.verdict is Verdict.FAIL and report.outcome is Verdict.FAIL


@pytest.mark.parametrize("seed", range(6))
def test_whenever_the_interval_of_the_mean_ratio_lies_above_the_bound_the_mean_rule_fails(seed):
    base, candidate = run(300, seed=100 + seed, spread=0.1), tailed(300, seed=200 + seed)
    tpot = row(evaluate_gate([candidate], baseline_of(base), gate_spec(TPOT)), "tpot_mean")
    assert (tpot.ci[0] > 1.10) == (tpot.verdict is Verdict.FAIL)  # one method, one level: the same statement


def test_the_same_tail_does_not_fail_a_median_rule():
    base, candidate = run(300, seed=101, spread=0.1), tailed(300, seed=201)
    rule = GateRule(metric="tpot_p50", max_ratio=1.10, critical=True)
    assert row(evaluate_gate([candidate], baseline_of(base), gate_spec(rule)), "tpot_p50").verdict is Verdict.PASS


@pytest.mark.parametrize("seed", range(5))
def test_a_clearly_worse_candidate_always_fails_and_an_identical_one_never_does(seed):
    base = run(200, seed=300 + seed, spread=0.3)
    worse = run(200, seed=400 + seed, spread=0.3, tpot_ms=12 * 1.3)
    equal = run(200, seed=500 + seed, spread=0.3)
    assert evaluate_gate([worse], baseline_of(base), gate_spec(TPOT), seed=seed).outcome is Verdict.FAIL
    assert evaluate_gate([equal], baseline_of(base), gate_spec(TPOT), seed=seed).outcome is not Verdict.FAIL
    assert evaluate_gate([base], baseline_of(base), gate_spec(TPOT), seed=seed).outcome is Verdict.PASS


def test_every_interval_end_is_a_one_sided_bound_at_the_stated_confidence():
    base, candidate = run(300, seed=1), run(300, seed=2, tpot_ms=12 * 1.2)
    at_95 = row(evaluate_gate([candidate], baseline_of(base), gate_spec(TPOT, confidence=0.95)), "tpot_mean")
    at_80 = row(evaluate_gate([candidate], baseline_of(base), gate_spec(TPOT, confidence=0.80)), "tpot_mean")
    assert at_95.ci[0] < at_80.ci[0] < at_95.ratio < at_80.ci[1] < at_95.ci[1]
    assert at_95.p_value == pytest.approx(at_80.p_value)   # the evidence does not depend on the level
    assert "bootstrap of the mean ratio" in at_95.method and "time blocks of 8" in at_95.method


# --- one family: Holm over the critical checks ---------------------------------------------------


def _marginal_candidate():
    """A candidate whose TPOT break is significant alone (p < 0.05) but not after Holm over 4."""
    base = run(300, seed=41, spread=0.3)
    candidate = run(300, seed=42, spread=0.3, tpot_ms=12 * 1.15)   # p = 0.024: below 0.05, above 0.05 / 4
    return base, candidate


def test_a_break_significant_alone_is_not_failed_once_holm_counts_the_other_critical_checks():
    base, candidate = _marginal_candidate()
    alone = row(evaluate_gate([candidate], baseline_of(base), gate_spec(TPOT)), "tpot_mean")
    assert alone.p_value < 0.05 and alone.p_adjusted == alone.p_value and alone.verdict is Verdict.FAIL
    others = [GateRule(metric=m, max_ratio=1.5, critical=True) for m in ("ttft_mean", "e2e_mean", "ttft_p50")]
    report = evaluate_gate([candidate], baseline_of(base), gate_spec(TPOT, *others))
    family = row(report, "tpot_mean")
    assert report.critical_tests == 4
    assert family.p_value == pytest.approx(alone.p_value) and family.p_adjusted == pytest.approx(4 * alone.p_value)
    assert family.p_adjusted >= 0.05 and family.verdict is not Verdict.FAIL
    assert "Holm-adjusted over 4 critical checks" in family.reason


def test_a_non_critical_check_is_tested_alone_at_the_level():
    base, candidate = _marginal_candidate()
    rules = [GateRule(metric="tpot_mean", max_ratio=1.10)] + [
        GateRule(metric=m, max_ratio=1.5, critical=True) for m in ("ttft_mean", "e2e_mean", "ttft_p50")]
    report = evaluate_gate([candidate], baseline_of(base), gate_spec(*rules))
    tpot = row(report, "tpot_mean")
    assert tpot.p_adjusted is None and tpot.verdict is Verdict.FAIL and not tpot.critical
    assert report.outcome is Verdict.INCONCLUSIVE and report.critical_tests == 3


# --- SLOs, p99, throughput over repeats -----------------------------------------------------------


def test_an_slo_breach_within_noise_is_not_failed():
    # mean TPOT about 12.1 ms with a wide spread against a 12 ms SLO: over it, not significantly
    candidate = run(60, seed=51, spread=0.6)
    report = evaluate_gate([candidate], None, gate_spec(GateRule(metric="tpot_mean"), slo=SloSpec(tpot_ms=12.0),
                                                        min_samples=7))
    slo = row(report, "tpot_mean", check="slo")
    assert slo.candidate > 12.0 and slo.p_value > 0.05 and slo.verdict is not Verdict.FAIL
    assert slo.ci[0] < 12.0 < slo.ci[1]                  # shown in milliseconds


def test_a_p99_break_within_noise_is_not_failed():
    base = run(100, seed=64, spread=0.4)
    candidate = run(100, seed=164, spread=0.4)          # the same latencies; the p99 of 100 requests wanders
    rule = GateRule(metric="ttft_p99", max_ratio=1.10, critical=True)
    p99 = row(evaluate_gate([candidate], baseline_of(base), gate_spec(rule)), "ttft_p99")
    assert p99.ratio > 1.10 and p99.p_value > 0.05 and p99.verdict is not Verdict.FAIL


def _throughput_runs(per_repeat_requests: tuple[int, ...], seed: int):
    rng = random.Random(seed)
    records = [record(0.12, 0.012 * rng.lognormvariate(0, 0.05), 16, send_ts=float(i), repeat=k)
               for k, n in enumerate(per_repeat_requests) for i in range(n)]
    return summarize(records, {k: 60.0 for k in range(len(per_repeat_requests))}, SloSpec())


def test_a_throughput_drop_in_every_repeat_is_tested_with_t_over_the_repeats():
    rule = GateRule(metric="output_tokens_per_s", min_ratio=0.9, critical=True)
    base = _throughput_runs((300, 300, 300), seed=1)
    steady = _throughput_runs((240, 246, 252), seed=2)        # ratios 0.80, 0.82, 0.84
    report = evaluate_gate([steady], baseline_of(base), gate_spec(rule))
    tput = row(report, "output_tokens_per_s")
    assert tput.repeats == pytest.approx((0.80, 0.82, 0.84))
    assert "over 3 candidate repeats against the baseline's 3 repeats" in tput.method
    assert tput.p_value < 0.05 and tput.verdict is Verdict.FAIL
    wild = _throughput_runs((180, 285, 210), seed=3)          # ratios 0.60, 0.95, 0.70: mean 0.75, wide
    wide = row(evaluate_gate([wild], baseline_of(base), gate_spec(rule)), "output_tokens_per_s")
    assert wide.ratio < 0.9 and wide.p_value > 0.05 and wide.verdict is Verdict.INCONCLUSIVE


# --- thresholds at their edges ----------------------------------------------------------------------


def test_an_error_rate_exactly_at_the_ceiling_passes():
    at = run(100, seed=5, errors=1)                           # 1 of 100 = 1.00%
    report = evaluate_gate([at], None, gate_spec(GateRule(metric="tpot_mean"), max_error_rate=0.01))
    assert row(report, "error_rate", check="errors").verdict is Verdict.PASS
    over = run(100, seed=5, errors=2)
    report = evaluate_gate([over], None, gate_spec(GateRule(metric="tpot_mean"), max_error_rate=0.01))
    assert row(report, "error_rate", check="errors").verdict is Verdict.FAIL


def test_exactly_min_samples_blocks_are_enough_and_requests_are_counted_in_blocks():
    base = run(300, seed=1)
    report = evaluate_gate([run(48, seed=2)], baseline_of(base), gate_spec(TPOT, min_samples=6))  # 6 blocks of 8
    assert row(report, "completed", check="samples").verdict is Verdict.PASS
    report = evaluate_gate([run(47, seed=2)], baseline_of(base), gate_spec(TPOT, min_samples=6))  # 5 whole blocks
    samples = row(report, "completed", check="samples")
    assert samples.verdict is Verdict.INCONCLUSIVE and samples.candidate == 5
    assert "only 5 independent blocks of 8 requests (47 completed" in samples.reason


def test_a_baseline_measured_on_too_few_requests_is_inconclusive_even_for_a_much_slower_candidate():
    thin = baseline_of(run(47, seed=1))
    report = evaluate_gate([run(300, seed=2, tpot_ms=30)], thin, gate_spec(TPOT, min_samples=6))
    tpot = row(report, "tpot_mean")
    assert tpot.verdict is Verdict.INCONCLUSIVE and "the baseline measured only 47 requests, 5 independent" in tpot.reason
    assert report.outcome is Verdict.INCONCLUSIVE
    enough = evaluate_gate([run(300, seed=2, tpot_ms=30)], baseline_of(run(48, seed=1)),
                           gate_spec(TPOT, min_samples=6))
    assert row(enough, "tpot_mean").verdict is Verdict.FAIL


# --- margins and repeats (bench_judge) --------------------------------------------------------------


@pytest.mark.parametrize("point", [1.06, 1.0])   # beyond the bound but not significantly; within it
@pytest.mark.parametrize("far, verdict", [(1.049, Verdict.PASS), (1.05, Verdict.PASS), (1.051, Verdict.INCONCLUSIVE),
                                          (1.10, Verdict.INCONCLUSIVE)])
def test_a_pass_needs_the_intervals_far_end_within_the_rule_itself(point, far, verdict):
    # The rule is the margin: "<= 1.05x" PASSes only a candidate whose upper bound is within
    # 1.05 (it used to allow 1.10, twice the rule's slack, while the report said 1.05).
    assert judge(Bound.max_ratio(1.05), point, False, "noise", (0.95, far))[0] is verdict


@pytest.mark.parametrize("far, verdict", [(0.90, Verdict.PASS), (0.899, Verdict.INCONCLUSIVE),
                                          (0.80, Verdict.INCONCLUSIVE)])
def test_a_min_bound_works_downwards(far, verdict):
    assert judge(Bound.min_ratio(0.90), 0.89, False, "noise", (far, 1.0))[0] is verdict
    assert judge(Bound.min_ratio(0.90), 0.95, False, "noise", (far, 1.1))[0] is verdict


def test_a_significant_break_fails_whatever_the_interval_and_an_unsignificant_one_never_does():
    bound = Bound.max_ratio(1.10)
    assert judge(bound, 1.3, True, "sig", (1.2, 1.4))[0] is Verdict.FAIL
    assert judge(bound, 1.3, True, "sig", None)[0] is Verdict.FAIL
    assert judge(bound, 1.3, False, "not sig", (1.0, 1.6))[0] is Verdict.INCONCLUSIVE
    # "significant" about a point within the bound means nothing: there is no break to confirm.
    assert judge(bound, 1.05, True, "sig", (1.0, 1.09))[0] is Verdict.PASS


def test_without_an_interval_the_figure_stands_for_itself():
    bound = Bound.max_ratio(1.10)
    assert judge(bound, 1.10, True, "one run", None) == (Verdict.PASS, "1.100 within ≤ 1.1× baseline")
    assert judge(bound, 1.1001, True, "one run", None)[0] is Verdict.FAIL


def test_an_slo_leaves_no_margin():
    bound = Bound.slo(100.0)
    assert judge(bound, 90.0, False, "", (80.0, 100.0))[0] is Verdict.PASS
    assert judge(bound, 90.0, False, "", (80.0, 100.5))[0] is Verdict.INCONCLUSIVE


def test_repeats_that_drift_apart_widen_the_interval_instead_of_failing_on_one_runs_luck():
    # Within each repeat the candidate is 12% slower than the baseline's 0.12 s TTFT, against a 5%
    # bound, so the pooled bootstrap alone calls it significant. But the repeats disagree with one
    # another (0.95x, 1.12x, 1.30x): the run-to-run spread says the 12% is not established.
    def drifting(scales, seed):
        rng = random.Random(seed)
        records = [record(0.12 * scale * rng.lognormvariate(0, 0.1), 0.01, 16, send_ts=float(i), repeat=k)
                   for k, scale in enumerate(scales) for i in range(300)]
        return summarize(records, {k: 60.0 for k in range(len(scales))}, SloSpec())

    rule = GateRule(metric="ttft_mean", max_ratio=1.05, critical=True)
    baseline = baseline_of(drifting((1.0, 1.0, 1.0), seed=1))
    steady = evaluate_gate([drifting((1.12, 1.12, 1.12), seed=2)], baseline, gate_spec(rule))
    drifted = evaluate_gate([drifting((0.95, 1.11, 1.30), seed=2)], baseline, gate_spec(rule))
    assert row(steady, "ttft_mean").verdict is Verdict.FAIL
    assert row(drifted, "ttft_mean").verdict is Verdict.INCONCLUSIVE
    assert "candidate's repeats (or one run's windows) spread wider" in row(drifted, "ttft_mean").method
    assert row(drifted, "ttft_mean").ci[1] > row(steady, "ttft_mean").ci[1]


def test_the_baselines_repeats_count_as_well():
    # The baseline's own repeats disagree (1.0x, 0.9x, 1.2x its median), the candidate's do not.
    rule = GateRule(metric="tpot_mean", max_ratio=1.05, critical=True)
    candidate = run(300, seed=2, repeats=3, tpot_ms=(12 * 1.12,) * 3)
    steady = evaluate_gate([candidate], baseline_of(run(300, seed=1, repeats=3)), gate_spec(rule))
    recorded = baseline_of(run(300, seed=1, repeats=3, tpot_ms=(12.0, 12 * 0.9, 12 * 1.2)))
    assert recorded.lookup("isl-3k", 8).repeats["tpot_mean"][2] > 14.0    # the baseline keeps them
    drifted = evaluate_gate([candidate], recorded, gate_spec(rule))
    assert row(steady, "tpot_mean").verdict is Verdict.FAIL
    assert row(drifted, "tpot_mean").verdict is Verdict.INCONCLUSIVE
    assert "baseline's repeats (or one run's windows) spread wider" in row(drifted, "tpot_mean").method


def test_an_slo_counts_the_repeats_spread_too():
    slo = SloSpec(tpot_ms=12.0)
    steady = run(300, seed=5, repeats=3, tpot_ms=(12.6,) * 3)
    drifting = run(300, seed=5, repeats=3, tpot_ms=(10.0, 12.6, 15.2))
    rows = [row(evaluate_gate([s], None, gate_spec(GateRule(metric="tpot_mean"), slo=slo)), "tpot_mean", check="slo")
            for s in (steady, drifting)]
    assert all(r.candidate > 12.0 for r in rows)
    assert rows[0].verdict is Verdict.FAIL
    assert rows[1].verdict is Verdict.INCONCLUSIVE and "candidate's repeats (or one run's windows) spread wider" in rows[1].method


def test_a_non_critical_break_just_short_of_significance_is_not_failed():
    base = run(300, seed=41, spread=0.3)
    candidate = run(300, seed=42, spread=0.3, tpot_ms=12 * 1.135)
    tpot = row(evaluate_gate([candidate], baseline_of(base), gate_spec(GateRule(metric="tpot_mean", max_ratio=1.10))),
               "tpot_mean")
    assert tpot.ratio > 1.10 and 0.05 < tpot.p_value < 0.10
    assert tpot.verdict is Verdict.INCONCLUSIVE and "p=0.071 ≥ 0.05" in tpot.reason
