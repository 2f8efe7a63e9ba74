"""The paired gate's statistics (tasks/planning/gate_paired.py) against hand computations and
simulated truths: the jackknife over windows, drift that cancels, pooling with fixed weights,
the bounds at their edges, the levels of the looks, and the error rates that result."""

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
