"""Mann-Whitney U and the seeded bootstrap, against hand-computed and enumerated values."""

import itertools
import random
import time

import pytest

from tests.timing import timing
from tasks.planning.bench_stats import bootstrap_ratio_ci, mann_whitney_u, normal_sf

MALES = [19, 22, 16, 29, 24]      # scipy.stats.mannwhitneyu's documented example
FEMALES = [20, 11, 17, 12]


def test_the_exact_p_value_matches_enumerating_every_ordering():
    result = mann_whitney_u(MALES, FEMALES, "greater")
    assert result.u == 17 and result.method == "exact"
    # Enumerate which 5 of the 9 pooled values could have been the first sample.
    pooled = MALES + FEMALES
    at_least = total = 0
    for chosen in itertools.combinations(range(9), 5):
        x = [pooled[i] for i in chosen]
        y = [pooled[i] for i in range(9) if i not in chosen]
        at_least += sum(a > b for a in x for b in y) >= 17
        total += 1
    assert result.p_value == pytest.approx(at_least / total) == pytest.approx(7 / 126)


def test_the_normal_approximation_matches_a_hand_computed_value():
    # 21 values each, no ties: U1 = 210, mean 220.5, sd sqrt(441 * 43 / 12) = 39.75,
    # z = (210 - 220.5 - 0.5) / 39.75 = -0.2767, P(Z > z) = 0.6090.
    x = list(range(1, 22))
    y = [v + 0.5 for v in x]
    result = mann_whitney_u(x, y, "greater")
    assert result.method == "normal" and result.u == 210
    assert result.p_value == pytest.approx(0.6090, abs=5e-4)


def test_ties_get_average_ranks_and_shrink_the_variance():
    # Ranks: 1 | 2,2,2 -> 3 | 3,3 -> 5.5; U1 = 1 + 3 + 3 + 5.5 - 10 = 2.5. Tie term 24 + 6 = 30,
    # var = 16/12 * (9 - 30/56) = 11.2857; "less": z = (13.5 - 8 - 0.5) / 3.3594 = 1.4884, p = 0.0683.
    result = mann_whitney_u([1, 2, 2, 3], [2, 3, 4, 5], "less")
    assert result.u == 2.5 and result.method == "normal"
    assert result.p_value == pytest.approx(0.0683, abs=5e-4)


def test_identical_samples_are_never_significant():
    rng = random.Random(4)
    values = [rng.random() for _ in range(200)]
    assert mann_whitney_u(values, values, "greater").p_value > 0.5
    assert mann_whitney_u([3.0] * 30, [3.0] * 30, "greater").p_value == 1.0


def test_a_clear_shift_is_significant_in_its_direction_only():
    rng = random.Random(5)
    slow = [rng.gauss(12, 1) for _ in range(300)]
    fast = [rng.gauss(10, 1) for _ in range(300)]
    assert mann_whitney_u(slow, fast, "greater").p_value < 1e-6
    assert mann_whitney_u(slow, fast, "less").p_value > 0.99


def test_the_normal_tail_is_right_at_known_points():
    assert normal_sf(0) == pytest.approx(0.5)
    assert normal_sf(1.6449) == pytest.approx(0.05, abs=1e-4)


def test_the_bootstrap_is_reproducible_for_a_seed():
    rng = random.Random(6)
    a = [rng.lognormvariate(3, 0.2) for _ in range(200)]
    b = [rng.lognormvariate(3, 0.2) for _ in range(200)]
    assert bootstrap_ratio_ci(a, b, "mean", 0.95, seed=1) == bootstrap_ratio_ci(a, b, "mean", 0.95, seed=1)
    assert bootstrap_ratio_ci(a, b, "mean", 0.95, seed=1) != bootstrap_ratio_ci(a, b, "mean", 0.95, seed=2)


@pytest.mark.parametrize("stat", ["mean", "p50", "p99"])
def test_the_bootstrap_interval_brackets_a_known_ratio(stat):
    rng = random.Random(7)
    base = [rng.lognormvariate(3, 0.1) for _ in range(400)]
    slower = [rng.lognormvariate(3, 0.1) * 1.2 for _ in range(400)]
    lo, hi = bootstrap_ratio_ci(slower, base, stat, 0.95, seed=3)
    assert lo < 1.2 < hi
    assert lo > 1.0


def test_against_a_fixed_figure_only_the_candidate_is_resampled():
    values = [9.0, 10.0, 11.0] * 100
    lo, hi = bootstrap_ratio_ci(values, 5.0, "mean", 0.95, seed=0)
    assert lo < 2.0 < hi and hi - lo < 0.1


def test_a_zero_baseline_has_no_ratio():
    assert bootstrap_ratio_ci([1.0, 2.0], 0.0, "mean", 0.95, seed=0) is None
    assert bootstrap_ratio_ci([], [1.0], "mean", 0.95, seed=0) is None


@timing
def test_many_thousand_samples_stay_fast_and_narrow():
    rng = random.Random(8)
    a = [rng.expovariate(1.0) for _ in range(20000)]
    b = [rng.expovariate(1.0) for _ in range(20000)]
    start = time.perf_counter()
    lo, hi = bootstrap_ratio_ci(a, b, "mean", 0.95, seed=0)
    p = mann_whitney_u(a, b, "greater").p_value
    assert time.perf_counter() - start < 5.0
    assert lo < 1.0 < hi and hi - lo < 0.06      # about 2 * 1.96 * sqrt(2 / 20000) = 0.039
    assert 0 < p < 1
