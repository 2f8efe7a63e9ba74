"""The paired gate's statistics (tasks/planning/gate_paired.py) against hand computations and
simulated truths: the jackknife over windows, widened for neighbours that share batches, drift
that cancels, pooling with fixed weights, the bounds at their edges, the levels of the looks, and
the error rates that result."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from tasks.planning.bench_judge import Verdict
from tasks.planning.bench_stats import t_quantile
from tasks.planning.gate_paired import (Check, Estimate, Levels, WindowSums, jackknife, judge_check, look,
                                        pooled)
from tasks.planning.group_sequential import nominal_levels

P1, P2 = ("isl-3k", 64), ("isl-120k", 8)


def test_the_jackknife_is_the_leave_one_window_out_spread_of_the_ratio_of_means():
    windows = [WindowSums(110.0, 10, 100.0, 10), WindowSums(240.0, 20, 200.0, 20), WindowSums(100.0, 10, 100.0, 10)]
    est = jackknife(windows)
    assert est.log_ratio == pytest.approx(math.log((450 / 40) / (400 / 40)))
    loo = [math.log((340 / 30) / (300 / 30)), math.log((210 / 20) / (200 / 20)), math.log((350 / 30) / (300 / 30))]
    mean = sum(loo) / 3
    assert est.se == pytest.approx(math.sqrt(2 / 3 * sum((v - mean) ** 2 for v in loo)))
    assert est.df == 2 and est.windows == 3


def test_too_few_windows_or_an_empty_colour_give_no_estimate():
    assert jackknife([WindowSums(1.0, 1, 1.0, 1)]) is None
    assert jackknife([WindowSums(1.0, 1, 0.0, 0), WindowSums(1.0, 1, 1.0, 1)]) is None   # a window leaves none


def _plain_and_lag1(windows: list[WindowSums]) -> tuple[float, float]:
    """By hand: the plain jackknife SE and the lag-1 autocorrelation of the leave-one-out values."""
    c, nc = sum(x.candidate_sum for x in windows), sum(x.candidate_n for x in windows)
    b, nb = sum(x.baseline_sum for x in windows), sum(x.baseline_n for x in windows)
    loo = [math.log(((c - x.candidate_sum) / (nc - x.candidate_n)) / ((b - x.baseline_sum) / (nb - x.baseline_n)))
           for x in windows]
    w, mean = len(loo), sum(loo) / len(loo)
    d = [v - mean for v in loo]
    squares = sum(v * v for v in d)
    return math.sqrt((w - 1) / w * squares), sum(d[i] * d[i + 1] for i in range(w - 1)) / squares


def _windows_of(log_ratios) -> list[WindowSums]:
    """Windows of 100 requests a colour whose ratio of means is exp(x), x per window."""
    return [WindowSums(100.0 * math.exp(float(x)), 100, 100.0, 100) for x in log_ratios]


def test_neighbours_that_move_together_widen_the_variance_by_twice_their_lag1_correlation():
    # A slow wave: each window close to its neighbours, so the leave-one-out values are too.
    windows = _windows_of([0.02 * math.sin(i / 2.0) for i in range(12)])
    plain, r1 = _plain_and_lag1(windows)
    assert r1 > 0.5
    est = jackknife(windows)
    assert est.se == pytest.approx(plain * math.sqrt(1.0 + 2.0 * r1))
    assert est.se > 1.4 * plain                     # sqrt(1 + 2 x 0.5) at least
    assert est.df == 11 and est.windows == 12      # the degrees of freedom stay W - 1


def test_neighbours_that_alternate_leave_the_plain_jackknife():
    # Up, down, up...: r1 near -1; the kernel unclipped would put the variance near 0 or below.
    windows = _windows_of([0.01 * (-1) ** i + 0.001 * i for i in range(10)])
    plain, r1 = _plain_and_lag1(windows)
    assert r1 < -0.5
    est = jackknife(windows)
    assert est.se == pytest.approx(plain, rel=1e-12)
    assert est.df == 9


@pytest.mark.parametrize("values", [[0.01, -0.02], [0.01, -0.02, 0.03], [0.05, 0.0, -0.05], [0.0, 0.01, 0.02]])
def test_with_three_windows_or_fewer_the_lag1_correlation_is_never_positive(values):
    # Centred, two or three deviations have a lag-1 sum of -d1^2 or -d2^2: nothing to widen.
    windows = _windows_of(values)
    assert _plain_and_lag1(windows)[1] <= 0.0
    assert jackknife(windows).se == pytest.approx(_plain_and_lag1(windows)[0], rel=1e-12)


def test_the_clip_sits_at_a_lag1_correlation_of_exactly_zero():
    # Four windows a, b, c, d: with the values symmetric the centred leave-one-out deviations are
    # (-u, -v, v, u), whose lag-1 sum is u v - v^2 + v u = v (2u - v): zero at v = 2u, positive
    # just below it, negative just above.
    def widened(v: float) -> float:
        windows = _windows_of([-0.01, -v * 0.01, v * 0.01, 0.01])
        plain, _ = _plain_and_lag1(windows)
        return (jackknife(windows).se / plain) ** 2

    assert _plain_and_lag1(_windows_of([-0.01, -0.02, 0.02, 0.01]))[1] == pytest.approx(0.0, abs=1e-3)
    assert widened(0.5) == pytest.approx(1.0 + 2.0 * _plain_and_lag1(_windows_of([-0.01, -0.005, 0.005, 0.01]))[1])
    assert widened(0.5) > 1.3
    assert widened(1.9) > 1.0
    assert widened(2.1) == pytest.approx(1.0, rel=1e-12)
    assert widened(3.0) == pytest.approx(1.0, rel=1e-12)


def test_identical_windows_give_a_zero_standard_error_not_an_error():
    est = jackknife([WindowSums(110.0, 10, 100.0, 10)] * 5)
    assert est.se == 0.0 and est.log_ratio == pytest.approx(math.log(1.1)) and est.df == 4


def _batched_point(rng: np.random.Generator, windows: int, batch_sigma: float) -> list[WindowSums]:
    """One point cut by time: batches of 8 requests, 16 requests a window, the boundaries in the
    middle of a batch, so each window holds half a batch, a batch and half a batch, the halves
    shared with its neighbours; each colour its own batch factors and its own requests' noise."""
    n = 16 * windows
    batch = (np.arange(n) + 4) // 8                        # a boundary halves a batch
    window = np.arange(n) // 16
    sums = []
    for _ in range(2):
        values = rng.lognormal(0.0, batch_sigma, batch[-1] + 1)[batch] * rng.lognormal(0.0, 0.05, n)
        sums.append(np.bincount(window, values, windows))
    return [WindowSums(float(c), 16, float(b), 16) for c, b in zip(*sums)]


def test_windows_that_share_batches_get_an_honest_standard_error_and_independent_ones_keep_theirs():
    # A window's mean weighs three batches 1/4, 1/2, 1/4, and shares a 1/4 with each neighbour:
    # their correlation about (1/16) / (6/16) = 1/6, the true variance about 1 + 2/6 = 4/3 of what
    # the windows, taken as independent, show.
    rng = np.random.default_rng(11)
    draws, w = 1500, 24
    truth, plain_var, widened_var = [], [], []
    for _ in range(draws):
        windows = _batched_point(rng, w, 0.1)
        est = jackknife(windows)
        truth.append(est.log_ratio)
        plain_var.append(_plain_and_lag1(windows)[0] ** 2)
        widened_var.append(est.se ** 2)
        assert est.df == w - 1
    true_var = float(np.var(truth))
    assert np.mean(plain_var) < 0.85 * true_var                     # the plain jackknife: too low
    assert 0.9 * true_var < np.mean(widened_var) < 1.25 * true_var  # widened: about right
    # Independent windows (no batch factor shared, the same requests' noise): about the same as the
    # plain jackknife, never below it, and often exactly it (r1 <= 0).
    ratios = []
    for _ in range(400):
        windows = _windows_of(rng.normal(0.0, 0.01, w))
        ratios.append(jackknife(windows).se / _plain_and_lag1(windows)[0])
    ratios = np.array(ratios)
    assert ratios.min() >= 1.0 - 1e-12
    assert np.mean(ratios < 1.0 + 1e-12) > 0.45
    assert np.median(ratios) < 1.05 and np.mean(ratios) < 1.12


def test_the_widened_interval_holds_its_level_where_the_plain_one_does_not():
    # One-sided 95% upper bounds at t(W - 1), the true log ratio 0: with neighbours sharing batches
    # the plain bound falls below the truth about 7.5% of the time; widened, nearer the 5% it should.
    rng = np.random.default_rng(5)
    w, draws = 24, 6000
    t = t_quantile(0.95, w - 1)
    plain_miss = widened_miss = 0
    for _ in range(draws):
        windows = _batched_point(rng, w, 0.1)
        est = jackknife(windows)
        plain_miss += est.log_ratio + t * _plain_and_lag1(windows)[0] < 0.0
        widened_miss += est.log_ratio + t * est.se < 0.0
    assert plain_miss / draws > 0.068
    assert widened_miss / draws < 0.065


def test_drift_common_to_both_colours_cancels():
    rng = random.Random(3)
    paired, unpaired_c, unpaired_b = [], [], []
    for _ in range(18):
        drift = math.exp(rng.gauss(0, 0.2))                 # the whole window 20% up or down
        c = [drift * rng.lognormvariate(0, 0.05) for _ in range(50)]
        b = [drift * rng.lognormvariate(0, 0.05) for _ in range(50)]
        paired.append(WindowSums(sum(c), 50, sum(b), 50))
        unpaired_c.append(sum(c) / 50)
        unpaired_b.append(sum(b) / 50)
    est = jackknife(paired)
    # The per-request noise alone: sd 0.05 over 900 requests a colour, two colours: about 0.0024.
    assert est.se < 0.004
    # The colours' own window means drift by 20%: measured apart, their ratio could not be judged.
    sd_apart = math.sqrt(sum((math.log(v) - sum(map(math.log, unpaired_c)) / 18) ** 2 for v in unpaired_c) / 17)
    assert sd_apart > 0.1


def test_a_contract_is_the_fixed_weight_mean_with_satterthwaite_degrees_of_freedom():
    est = {P1: Estimate(math.log(1.02), 0.01, 17.0, 18), P2: Estimate(math.log(1.10), 0.04, 5.0, 6)}
    both = pooled(est, {P1: 3.0, P2: 1.0})                    # normalised: 0.75, 0.25
    assert both.log_ratio == pytest.approx(0.75 * math.log(1.02) + 0.25 * math.log(1.10))
    v1, v2 = (0.75 * 0.01) ** 2, (0.25 * 0.04) ** 2
    assert both.se == pytest.approx(math.sqrt(v1 + v2))
    assert both.df == pytest.approx((v1 + v2) ** 2 / (v1 ** 2 / 17 + v2 ** 2 / 5))
    assert both.windows == 6
    assert pooled(est, {P1: 1.0, ("isl-60k", 16): 1.0}) is None   # a planned point missing: no estimate


@pytest.mark.parametrize("upper_z, verdict", [(-1e-9, Verdict.PASS), (0.0, Verdict.PASS), (1e-6, None)])
def test_a_check_passes_only_with_its_upper_bound_at_most_the_margin(upper_z, verdict):
    t = t_quantile(0.95, 10)
    # log ratio chosen so the upper bound sits exactly at the margin, then a hair above it
    est = Estimate(math.log(1.05) - t * 0.02 + upper_z, 0.02, 10.0, 11)
    assert judge_check(Check("ttft", "ttft", 1.05, {P1: 1.0}), est, 0.05, 0.01).verdict is verdict


@pytest.mark.parametrize("lower_z, verdict", [(1e-6, Verdict.FAIL), (0.0, None), (-1e-6, None)])
def test_a_check_fails_only_with_its_lower_bound_beyond_the_margin(lower_z, verdict):
    t = t_quantile(1 - 0.01, 10)
    est = Estimate(math.log(1.05) + t * 0.02 + lower_z, 0.02, 10.0, 11)
    result = judge_check(Check("ttft", "ttft", 1.05, {P1: 1.0}), est, 0.05, 0.01)
    assert result.verdict is verdict
    assert result.lower == pytest.approx(1.05 * math.exp(lower_z))


def test_the_fail_side_splits_alpha_over_the_checks_and_both_sides_spend_over_the_looks():
    levels = Levels.of(0.05, 3, 2.0, 8)
    assert levels.passing == nominal_levels(0.05, 3, 2.0, 1)
    assert levels.failing == nominal_levels(0.05 / 8, 3, 2.0, 1)
    assert levels.passing[0] < levels.passing[1] < levels.passing[2] < 0.05


def test_a_look_fails_on_any_check_passes_on_all_and_is_undecided_only_at_the_last():
    checks = [Check("ttft", "ttft", 1.05, {P1: 1.0}), Check("tpot", "tpot", 1.05, {P1: 1.0})]
    levels = Levels.of(0.05, 3, 2.0, 2)
    equal = Estimate(0.0, 0.001, 30.0, 31)
    wide = Estimate(0.0, 0.5, 30.0, 31)
    worse = Estimate(math.log(1.3), 0.001, 30.0, 31)
    assert look(checks, {"ttft": {P1: equal}, "tpot": {P1: equal}}, levels, 1).outcome is Verdict.PASS
    assert look(checks, {"ttft": {P1: equal}, "tpot": {P1: worse}}, levels, 1).outcome is Verdict.FAIL
    assert look(checks, {"ttft": {P1: equal}, "tpot": {P1: wide}}, levels, 2).outcome is None
    last = look(checks, {"ttft": {P1: equal}, "tpot": {P1: wide}}, levels, 3)
    assert last.outcome is Verdict.INCONCLUSIVE and last.results[0].verdict is Verdict.PASS


def _simulate(effect: float, draws: int, seed: int) -> dict:
    """One point, 18 windows of 60 requests a colour (log-normal sd 0.3), drift 0.1 per window in
    common; three looks at 6, 12 and 18 windows; one contract at 1.05."""
    check = Check("ttft", "ttft", 1.05, {P1: 1.0})
    levels = Levels.of(0.05, 3, 2.0, 1)
    rng = np.random.default_rng(seed)
    outcomes = {Verdict.PASS: 0, Verdict.FAIL: 0, Verdict.INCONCLUSIVE: 0}
    for _ in range(draws):
        drift = np.exp(rng.normal(0, 0.1, size=(18, 1)))
        c = (effect * drift * rng.lognormal(0, 0.3, size=(18, 60))).sum(axis=1)
        b = (drift * rng.lognormal(0, 0.3, size=(18, 60))).sum(axis=1)
        windows = [WindowSums(float(c[i]), 60, float(b[i]), 60) for i in range(18)]
        for k in (1, 2, 3):
            seen = look([check], {"ttft": {P1: jackknife(windows[:6 * k])}}, levels, k)
            if seen.outcome is not None:
                outcomes[seen.outcome] += 1
                break
    return {v: n / draws for v, n in outcomes.items()}


def test_the_error_rates_hold_at_their_stated_levels():
    # 800 draws: a 5% rate has a standard error of 0.8 points.
    at_margin = _simulate(1.05, 800, seed=1)
    assert at_margin[Verdict.PASS] <= 0.07
    equal = _simulate(1.0, 800, seed=2)
    assert equal[Verdict.FAIL] <= 0.01 and equal[Verdict.PASS] >= 0.9
    twice = _simulate(1.10, 800, seed=3)
    assert twice[Verdict.FAIL] >= 0.9
    _simulate.measured = (at_margin, equal, twice)
