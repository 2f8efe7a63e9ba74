"""The promotion gate's verdicts on synthetic candidates with known differences from the baseline."""

from pathlib import Path

import pytest

from blueprints.loader import load_blueprint
from blueprints.schema import BaselinePoint, BaselineSpec, GateRule, SloSpec
from tasks.planning.bench_baseline import baseline_from_spec, baseline_from_summaries
from tasks.planning.gate import Verdict, evaluate_gate, expected_points
from tests.unit.bench.helpers import gate_spec, run

SANDBOX = load_blueprint(Path(__file__).parents[3] / "blueprints" / "sandbox-2p2d.yaml")
TPOT = GateRule(metric="tpot_mean", max_ratio=1.10, critical=True)


def baseline_of(*summaries):
    return baseline_from_summaries(summaries, source="previous run", run_id="run-0")


def row(report, metric, scenario="isl-3k", concurrency=8, check=None):
    (found,) = [r for r in report.rows
                if (r.metric, r.scenario, r.concurrency) == (metric, scenario, concurrency)
                and (r.check == check or check is None and r.check != "slo")]
    return found


@pytest.fixture(scope="module")
def baseline_run():
    return run(300, seed=1)


def test_a_candidate_20_percent_slower_on_tpot_fails_on_the_critical_tpot_check(baseline_run):
    report = evaluate_gate([run(300, seed=2, tpot_ms=12 * 1.2)], baseline_of(baseline_run), SANDBOX.gate)
    assert report.outcome is Verdict.FAIL
    tpot = row(report, "tpot_mean")
    assert tpot.verdict is Verdict.FAIL and tpot.critical
    assert tpot.ratio == pytest.approx(1.2, abs=0.03)
    assert tpot.p_value < 0.05
    assert any("tpot_mean" in reason for reason in report.reasons)


def test_an_equal_candidate_measured_with_other_noise_passes(baseline_run):
    report = evaluate_gate([run(300, seed=3)], baseline_of(baseline_run), SANDBOX.gate)
    assert report.outcome is Verdict.PASS
    assert row(report, "tpot_mean").verdict is Verdict.PASS


def test_too_few_samples_are_inconclusive_even_for_a_much_slower_candidate(baseline_run):
    report = evaluate_gate([run(10, seed=4, tpot_ms=30)], baseline_of(baseline_run), SANDBOX.gate)
    assert report.outcome is Verdict.INCONCLUSIVE
    assert row(report, "tpot_mean").verdict is Verdict.INCONCLUSIVE
    assert "min_samples" in row(report, "completed").reason


def test_five_percent_errors_over_a_one_percent_ceiling_fail(baseline_run):
    candidate = run(300, seed=5, errors=15)
    report = evaluate_gate([candidate], baseline_of(baseline_run), gate_spec(TPOT, max_error_rate=0.01))
    assert candidate.error_rate == pytest.approx(0.05)
    assert report.outcome is Verdict.FAIL
    errors = row(report, "error_rate")
    assert errors.verdict is Verdict.FAIL and errors.critical
    assert row(report, "tpot_mean").verdict is Verdict.PASS


def test_errors_under_the_ceiling_do_not_fail(baseline_run):
    report = evaluate_gate([run(300, seed=5, errors=2)], baseline_of(baseline_run),
                           gate_spec(TPOT, max_error_rate=0.01))
    assert report.outcome is Verdict.PASS


def test_a_saturated_client_is_inconclusive(baseline_run):
    report = evaluate_gate([run(300, seed=6, tpot_ms=30, saturated=True)], baseline_of(baseline_run),
                           SANDBOX.gate)
    assert report.outcome is Verdict.INCONCLUSIVE
    assert "saturated" in row(report, "tpot_mean").reason


def test_a_report_only_metric_breaking_its_ratio_does_not_change_the_outcome(baseline_run):
    gate = gate_spec(TPOT, GateRule(metric="ttft_mean", max_ratio=1.05, report_only=True))
    report = evaluate_gate([run(300, seed=7, ttft_ms=200)], baseline_of(baseline_run), gate)
    ttft = row(report, "ttft_mean")
    assert ttft.verdict is Verdict.FAIL and not ttft.gated
    assert report.outcome is Verdict.PASS


def test_a_non_critical_failure_leaves_the_decision_to_a_person(baseline_run):
    gate = gate_spec(TPOT, GateRule(metric="ttft_mean", max_ratio=1.05))
    report = evaluate_gate([run(300, seed=7, ttft_ms=200)], baseline_of(baseline_run), gate)
    assert row(report, "ttft_mean").verdict is Verdict.FAIL
    assert report.outcome is Verdict.INCONCLUSIVE


def test_a_violation_within_wide_noise_is_left_to_a_person():
    # Wide spread, few requests, a true ratio just above the bound: the data cannot tell.
    noisy_base = run(60, seed=11, spread=0.6)
    candidate = run(60, seed=22, spread=0.6, tpot_ms=12 * 1.12)
    tpot = row(evaluate_gate([candidate], baseline_of(noisy_base), gate_spec(TPOT, min_samples=7)), "tpot_mean")
    assert tpot.ratio > 1.10                       # the point estimate breaks the bound...
    assert tpot.p_value > 0.05                     # ...but not significantly,
    assert tpot.ci[1] > 1.20                       # and the interval reaches far past it
    assert tpot.verdict is Verdict.INCONCLUSIVE


def test_a_rule_is_its_own_margin_a_violation_within_narrow_noise_never_passes():
    # 12% slower against "<= 1.10x", not significantly so: its upper bound (about 1.18) would have
    # PASSed inside the old margin of 1.10 + 0.10 while the report said "<= 1.1x". Now the rule is
    # the margin: the upper bound must be within 1.10 itself.
    base = run(300, seed=11, spread=0.3)
    candidate = run(300, seed=14, spread=0.3, tpot_ms=12 * 1.12)
    tpot = row(evaluate_gate([candidate], baseline_of(base), gate_spec(TPOT)), "tpot_mean")
    assert tpot.ratio > 1.10 and tpot.p_value > 0.05
    assert 1.10 < tpot.ci[1] <= 1.20
    assert tpot.verdict is Verdict.INCONCLUSIVE
    assert "not significantly" in tpot.reason and "reaches beyond 1.100" in tpot.reason
    equal = row(evaluate_gate([run(300, seed=15, spread=0.3)], baseline_of(base), gate_spec(TPOT)), "tpot_mean")
    assert equal.ci[1] <= 1.10 and equal.verdict is Verdict.PASS and "stays within 1.100" in equal.reason


def test_an_slo_breach_fails_even_without_a_baseline():
    gate = gate_spec(GateRule(metric="tpot_mean"), slo=SloSpec(tpot_ms=100))
    report = evaluate_gate([run(300, seed=8, tpot_ms=150)], None, gate)
    slo = row(report, "tpot_mean", check="slo")
    assert slo.check == "slo" and slo.verdict is Verdict.FAIL and slo.critical
    assert report.outcome is Verdict.FAIL


def test_only_slo_rules_need_no_baseline():
    gate = gate_spec(GateRule(metric="tpot_mean"), slo=SloSpec(tpot_ms=100, ttft_ms=5000))
    assert evaluate_gate([run(300, seed=8)], None, gate).outcome is Verdict.PASS


def test_a_ratio_rule_without_a_baseline_is_inconclusive():
    report = evaluate_gate([run(300, seed=8)], None, gate_spec(TPOT))
    assert report.outcome is Verdict.INCONCLUSIVE
    assert "no point for scenario" in row(report, "tpot_mean").reason


def test_a_concurrency_the_baseline_skips_is_held_to_the_slos_only(baseline_run):
    gate = gate_spec(TPOT, slo=SloSpec(tpot_ms=100))
    other = run(300, seed=9, tpot_ms=30, concurrency=1)           # much slower, but no baseline at 1
    report = evaluate_gate([run(300, seed=3), other], baseline_of(baseline_run), gate)
    skipped = row(report, "tpot_mean", concurrency=1, check="slo")
    skipped_ratio = [r for r in report.rows if r.concurrency == 1 and r.check == "ratio"]
    assert skipped_ratio and all(not r.gated and r.verdict is None for r in skipped_ratio)
    assert skipped.verdict is Verdict.PASS                         # the SLO row at concurrency 1
    assert report.outcome is Verdict.PASS


def test_published_figures_gate_through_the_candidates_bootstrap_interval():
    spec = BaselineSpec(source="published", cv={"ttft": 0.1, "tpot": 0.1}, scenarios={"isl-3k": [
        BaselinePoint(concurrency=8, completed=300, ttft_ms_mean=121, tpot_ms_mean=12.06)]})
    gate = gate_spec(TPOT, GateRule(metric="ttft_mean", max_ratio=1.05, critical=True))
    slower = evaluate_gate([run(300, seed=2, tpot_ms=12 * 1.2)], baseline_from_spec(spec), gate)
    assert slower.outcome is Verdict.FAIL and row(slower, "tpot_mean").ci[0] > 1.10
    assert evaluate_gate([run(300, seed=3)], baseline_from_spec(spec), gate).outcome is Verdict.PASS


def test_a_baseline_point_without_the_gated_figure_is_inconclusive():
    spec = BaselineSpec(source="published", cv={"ttft": 0.1, "tpot": 0.1}, scenarios={"isl-3k": [
        BaselinePoint(concurrency=8, completed=300, ttft_ms_mean=120, tpot_ms_mean=12)]})
    gate = gate_spec(TPOT, GateRule(metric="ttft_p99", max_ratio=1.10))
    report = evaluate_gate([run(300, seed=3)], baseline_from_spec(spec), gate)
    assert row(report, "ttft_p99").verdict is Verdict.INCONCLUSIVE
    assert report.outcome is Verdict.INCONCLUSIVE


def test_a_slower_p99_fails_on_its_bootstrap_interval(baseline_run):
    gate = gate_spec(GateRule(metric="ttft_p99", max_ratio=1.10, critical=True))
    report = evaluate_gate([run(300, seed=10, ttft_ms=120 * 1.4)], baseline_of(baseline_run), gate)
    assert row(report, "ttft_p99").verdict is Verdict.FAIL
    assert report.outcome is Verdict.FAIL


def test_a_slow_repeat_alone_does_not_fail_the_pooled_result():
    baseline = baseline_of(run(100, seed=20, repeats=3))
    # One repeat 50% slower, two within the bound: the pooled ratio breaks the bound...
    candidate = run(100, seed=21, repeats=3, tpot_ms=(18.0, 12 * 1.08, 12 * 1.08))
    report = evaluate_gate([candidate], baseline, gate_spec(TPOT))
    tpot = row(report, "tpot_mean")
    assert tpot.ratio > 1.10
    # ...but the repeats disagree far more than requests within one do, so their spread is the
    # noise, and against it the break is not significant.
    assert "candidate's repeats (or one run's windows) spread wider" in tpot.method and tpot.p_value > 0.05
    assert tpot.verdict is Verdict.INCONCLUSIVE


def test_a_regression_in_every_repeat_fails():
    baseline = baseline_of(run(100, seed=20, repeats=3))
    report = evaluate_gate([run(100, seed=23, repeats=3, tpot_ms=12 * 1.2)], baseline, gate_spec(TPOT))
    assert row(report, "tpot_mean").repeats and report.outcome is Verdict.FAIL


def test_a_throughput_drop_in_a_single_run_fails_a_critical_min_ratio(baseline_run):
    gate = gate_spec(GateRule(metric="output_tokens_per_s", min_ratio=0.9, critical=True))
    report = evaluate_gate([run(200, seed=24)], baseline_of(baseline_run), gate)   # 200 vs 300 requests / 60 s
    assert row(report, "output_tokens_per_s").ratio == pytest.approx(2 / 3)
    assert report.outcome is Verdict.FAIL


def test_a_point_the_blueprint_asks_for_but_was_not_measured_is_inconclusive(baseline_run):
    report = evaluate_gate([run(300, seed=3)], baseline_of(baseline_run), SANDBOX.gate,
                           expected=expected_points(SANDBOX.benchmark))
    assert report.outcome is Verdict.INCONCLUSIVE
    assert row(report, "results", scenario="isl-60k", concurrency=4).reason == "no results for this point"


def test_no_results_at_all_is_inconclusive():
    assert evaluate_gate([], None, SANDBOX.gate).outcome is Verdict.INCONCLUSIVE


def test_the_verdict_is_reproducible(baseline_run):
    candidate = run(300, seed=2, tpot_ms=12 * 1.2)
    first = evaluate_gate([candidate], baseline_of(baseline_run), SANDBOX.gate, seed=5)
    assert evaluate_gate([candidate], baseline_of(baseline_run), SANDBOX.gate, seed=5) == first


def test_a_published_figure_without_a_stated_spread_for_its_kind_is_not_held_exact():
    # baseline.cv states TTFT and TPOT; an e2e figure (none published) and a throughput (no
    # between-run CV) cannot be compared without holding the figure exact: not judged.
    spec = BaselineSpec(source="published", cv={"ttft": 0.1, "tpot": 0.1}, scenarios={"isl-3k": [
        BaselinePoint(concurrency=8, completed=300, ttft_ms_mean=121, tpot_ms_mean=12.06, output_tokens_per_s=900)]})
    gate = gate_spec(TPOT, GateRule(metric="output_tokens_per_s", min_ratio=0.5))
    tput = row(evaluate_gate([run(300, seed=3)], baseline_from_spec(spec), gate), "output_tokens_per_s")
    assert tput.verdict is Verdict.INCONCLUSIVE
    assert "carries no spread between runs (baseline.cv.run)" in tput.reason
    stated = spec.model_copy(update={"cv": spec.cv.model_copy(update={"run": 0.05})})
    judged = row(evaluate_gate([run(300, seed=3)], baseline_from_spec(stated), gate), "output_tokens_per_s")
    assert judged.verdict is not Verdict.INCONCLUSIVE and "published figure with its between-run spread" in judged.method


def test_a_recorded_figures_spread_from_two_repeats_is_read_with_students_t():
    # A recorded baseline keeps no ITL samples by default: its itl_mean is known from its repeats
    # only. Two repeats give their spread 1 degree of freedom: t = 6.31, not z = 1.645, so the
    # candidate's upper bound reaches past 1.10 (it stayed at 1.09 read with z: a PASS).
    recorded = baseline_of(run(150, seed=1, repeats=2, tpot_ms=(12.0, 12.6)))
    gate = gate_spec(GateRule(metric="itl_mean", max_ratio=1.10, critical=True))
    itl = row(evaluate_gate([run(300, seed=3, tpot_ms=13.0)], recorded, gate), "itl_mean")
    assert itl.verdict is Verdict.INCONCLUSIVE and itl.ci[1] > 1.14
    assert "a recorded figure with the standard error of its repeats" in itl.method and "Student's t, 1.2" in itl.method


def test_a_recorded_baseline_without_the_samples_or_repeats_of_a_kind_says_what_to_record():
    recorded = baseline_of(run(300, seed=1))               # one run, ITL samples left out
    gate = gate_spec(GateRule(metric="itl_mean", max_ratio=1.10, critical=True))
    itl = row(evaluate_gate([run(300, seed=3)], recorded, gate), "itl_mean")
    assert itl.verdict is Verdict.INCONCLUSIVE
    assert "the recorded baseline kept no itl samples and fewer than 2 repeats" in itl.reason
    assert "baseline.cv" not in itl.reason
