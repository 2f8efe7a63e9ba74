"""The gate's statistics against hand-computed values: the time-block bootstrap, Student's t, Holm."""

import math
import random

import numpy as np
import pytest

from tasks.planning.bench_stats import (Blocks, Figure, RatioTest, betainc, bootstrap_ratio, holm, normal_quantile,
                                        normal_sf, t_quantile, t_sf, t_test)


def test_the_normal_tail_and_quantile_are_right_at_known_points():
    assert normal_sf(0) == pytest.approx(0.5)
    assert normal_sf(1.6449) == pytest.approx(0.05, abs=1e-4)
    assert normal_quantile(0.95) == pytest.approx(1.644854, abs=1e-6)
    assert normal_quantile(0.975) == pytest.approx(1.959964, abs=1e-6)


def test_students_t_matches_the_tables():
    # one-sided 5% critical values: df 2 -> 2.920, df 4 -> 2.132, df 30 -> 1.697
    for df, t in ((2, 2.919986), (4, 2.131847), (30, 1.697261)):
        assert t_sf(t, df) == pytest.approx(0.05, abs=1e-6)
        assert t_quantile(0.95, df) == pytest.approx(t, abs=1e-5)
    assert t_sf(0.0, 5) == pytest.approx(0.5) and t_sf(-2.015, 5) == pytest.approx(0.95, abs=1e-4)
    assert betainc(2, 3, 0.4) == pytest.approx(0.5248)  # 1 - sum over the binomial(4, 0.4) tail


def test_the_t_test_of_repeats_is_one_sided_at_the_bound():
    test = t_test([0.80, 0.82, 0.84])  # mean 0.82, sd 0.02, se 0.011547
    assert (test.mean, test.sd) == (pytest.approx(0.82), pytest.approx(0.02))
    # min bound 0.9: t = (0.9 - 0.82) / 0.011547 = 6.93 on 2 df
    assert test.p_beyond(0.9, higher_is_worse=False) == pytest.approx(t_sf(0.08 / (0.02 / math.sqrt(3)), 2))
    assert test.p_beyond(0.9, higher_is_worse=False) < 0.05 < test.p_beyond(0.8, higher_is_worse=False)
    lo, hi = test.bounds(0.95)
    assert hi == pytest.approx(0.82 + 2.919986 * 0.02 / math.sqrt(3), abs=1e-5) and lo < 0.82
    assert t_test([0.8]) is None  # one run: no noise estimate
    assert t_test([0.8, 0.8]).p_beyond(0.9, False) == 0.0 and t_test([1.0, 1.0]).p_beyond(0.9, False) == 1.0


def test_holm_adjusts_by_rank_and_keeps_the_order_of_the_raw_p_values():
    adjusted = holm({"a": 0.01, "b": 0.04, "c": 0.03})
    assert adjusted == {"a": pytest.approx(0.03), "c": pytest.approx(0.06), "b": pytest.approx(0.06)}
    assert holm({"only": 0.02}) == {"only": 0.02}
    assert holm({}) == {}
    assert holm({"a": 0.6, "b": 0.7}) == {"a": 1.0, "b": 1.0}  # capped at 1


def test_the_bound_and_the_p_value_say_the_same_thing():
    test = RatioTest(1.2, 0.05, "hand-made")
    lo, hi = test.bounds(0.95)
    assert lo == pytest.approx(1.2 * math.exp(-1.644854 * 0.05)) and hi == pytest.approx(1.2 * math.exp(1.644854 * 0.05))
    assert test.p_beyond(lo, True) == pytest.approx(0.05, abs=1e-6)      # exactly at the lower bound: p = alpha
    assert test.p_beyond(1.1, True) < 0.05 < test.p_beyond(1.15, True)    # 1.1 < lo = 1.106 < 1.15
    assert test.p_beyond(1.31, False) < 0.05 < test.p_beyond(1.30, False)  # hi = 1.3028: a min bound above it
    assert RatioTest(1.2, 0.0, "").p_beyond(1.1, True) == 0.0 and RatioTest(1.0, 0.0, "").p_beyond(1.1, True) == 1.0


def test_the_bootstrap_is_reproducible_for_a_seed():
    rng = random.Random(6)
    a = Blocks.of([rng.lognormvariate(3, 0.2) for _ in range(200)])
    b = Blocks.of([rng.lognormvariate(3, 0.2) for _ in range(200)])
    assert bootstrap_ratio(a, b, "mean", seed=1) == bootstrap_ratio(a, b, "mean", seed=1)
    assert bootstrap_ratio(a, b, "mean", seed=1) != bootstrap_ratio(a, b, "mean", seed=2)


@pytest.mark.parametrize("stat", ["mean", "p50", "p99"])
def test_the_bootstrap_interval_brackets_a_known_ratio(stat):
    rng = random.Random(7)
    base = Blocks.of([rng.lognormvariate(3, 0.1) for _ in range(400)])
    slower = Blocks.of([rng.lognormvariate(3, 0.1) * 1.2 for _ in range(400)])
    lo, hi = bootstrap_ratio(slower, base, stat, seed=3).bounds(0.95)
    assert 1.0 < lo < 1.2 < hi


def test_the_standard_error_of_a_mean_ratio_is_the_textbook_one():
    # log-normal sigma 0.3 on both sides, 900 values each: se(log mean ratio) ~ cv * sqrt(2 / n)
    rng = np.random.default_rng(11)
    a, b = rng.lognormal(0, 0.3, 900), rng.lognormal(0, 0.3, 900)
    cv = math.sqrt(math.exp(0.09) - 1)
    se = bootstrap_ratio(Blocks.of(a), Blocks.of(b), "mean", seed=0, resamples=2000).se_log
    assert se == pytest.approx(cv * math.sqrt(2 / 900), rel=0.12)


def test_against_a_fixed_figure_only_the_candidate_is_resampled():
    values = Blocks.of([9.0, 10.0, 11.0] * 100)
    test = bootstrap_ratio(values, 5.0, "mean", seed=0)
    lo, hi = test.bounds(0.95)
    assert test.ratio == pytest.approx(2.0) and lo < 2.0 < hi and hi - lo < 0.05
    assert "a fixed figure" in test.method


def test_a_published_figure_adds_the_variance_it_was_measured_with():
    values = Blocks.of([9.0, 10.0, 11.0] * 100)
    exact = bootstrap_ratio(values, 5.0, "mean", seed=0)
    published = bootstrap_ratio(values, Figure.of(5.0, "mean", cv=0.3, n=57), "mean", seed=0)
    assert published.ratio == exact.ratio
    assert published.se_log ** 2 == pytest.approx(exact.se_log ** 2 + 0.3 ** 2 / 57)
    assert "a published figure with its own standard error (0.04 in log)" in published.method


def test_a_figures_variance_follows_its_statistic():
    assert Figure.of(10.0, "mean", cv=0.2, n=100).var_log == pytest.approx(0.04 / 100)
    # The median of n normal values: asymptotic variance (pi / 2) sigma^2 / n.
    assert Figure.of(10.0, "p50", cv=0.2, n=100).var_log == pytest.approx(math.pi / 2 * 0.04 / 100, rel=1e-9)
    # A tail percentile is less exact than the median: p99's factor is 0.0099 / phi(2.326)^2 = 13.94.
    assert Figure.of(10.0, "p99", cv=0.2, n=100).var_log == pytest.approx(13.937 * 0.04 / 100, rel=1e-3)
    assert Figure.of(10.0, "run", cv=0.03, n=1).var_log == pytest.approx(0.0009)


def test_blocks_of_requests_that_moved_together_widen_the_interval():
    # 40 batches of 8 requests, each batch sharing a slow or fast step: iid resampling sees 320
    # values; the batches are only 40 independent observations.
    rng = np.random.default_rng(5)
    steps = np.repeat(rng.lognormal(0, 0.3, 40), 8) * rng.lognormal(0, 0.02, 320)
    as_if_independent = bootstrap_ratio(Blocks.of(steps, block=1), 1.0, "mean", seed=0).se_log
    by_block = bootstrap_ratio(Blocks.of(steps, block=8), 1.0, "mean", seed=0).se_log
    assert by_block > 2 * as_if_independent


def test_itl_gaps_are_resampled_with_their_request():
    # two requests: one with 9 fast gaps, one with 1 slow gap; by request, half the replicates
    # draw mostly one kind (a wide spread); by gap it would be narrow around the pooled mean.
    gaps = [1.0] * 9 + [10.0]
    grouped = Blocks.of(gaps, counts=[9, 1])
    assert grouped.n_blocks == 2 and grouped.stat("mean") == pytest.approx(1.9)
    reps = grouped.replicates("mean", np.random.default_rng(0), 400)
    assert set(np.round(reps, 6)) <= {1.0, 1.9, 10.0}        # both fast, one each, both slow
    assert Blocks.of(gaps, counts=[5, 5]).n_blocks == 2
    assert Blocks.of(gaps, counts=[3, 3]).n_blocks == 10   # counts of another family: one value each


def test_a_weighted_replicate_of_a_percentile_is_numpys_on_the_expanded_sample():
    values = [5.0, 1.0, 3.0, 9.0, 7.0]
    blocks = Blocks.of(values)
    rng = np.random.default_rng(3)
    reps = blocks.replicates("p90", np.random.default_rng(3), 50)
    draws = rng.integers(0, 5, size=(50, 5))
    expected = [np.percentile(np.asarray(values)[d], 90) for d in draws]
    assert reps == pytest.approx(expected)


def test_a_zero_baseline_or_no_values_has_no_ratio():
    assert bootstrap_ratio(Blocks.of([1.0, 2.0]), 0.0, "mean", seed=0) is None
    assert bootstrap_ratio(Blocks.of([]), Blocks.of([1.0]), "mean", seed=0) is None
    assert bootstrap_ratio(Blocks.of([1.0]), Blocks.of([]), "mean", seed=0) is None
