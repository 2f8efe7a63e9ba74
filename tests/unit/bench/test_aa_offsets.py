"""Recorded baselines kept as windows, and the A/A offsets of unchanged redeploys that give a gate
against a recorded baseline its between-session spread."""

from __future__ import annotations

import math

import numpy as np
import pytest

from blueprints.schema import GateRule
from tasks.errors import ConfigError
from tasks.planning import aa_offsets
from tasks.planning.aa_offsets import Comparison
from tasks.planning.bench_baseline import baseline_from_summaries, dumps_baseline, loads_baseline
from tasks.planning.bench_stats import WINDOWS, Blocks, bootstrap_ratio, window_means
from tasks.planning.gate import Verdict, evaluate_gate
from tests.unit.bench.helpers import gate_spec, run


def test_a_run_is_cut_into_twelve_windows_of_whole_blocks_and_fewer_blocks_give_none():
    values = [float(i) for i in range(96)]                    # 24 blocks of 4
    means = window_means(values, block=4)
    assert len(means) == WINDOWS == 12
    assert means[0] == pytest.approx(3.5) and means[-1] == pytest.approx(91.5)  # 8 values (2 blocks) each
    assert window_means(values[:48], block=4) == tuple(float(4 * i) + 1.5 for i in range(12))  # 12 blocks: one each
    assert window_means(values[:44], block=4) == ()           # 11 blocks: fewer than 12 windows
    # A last, partial block is a block: 45 values are 12 blocks of 4.
    assert len(window_means(values[:45], block=4)) == 12
    # 13 blocks in 12 windows: the spare block joins a window whole (never a block split in two).
    assert window_means(values[:52], block=4) == tuple(4.0 * i + 1.5 for i in range(11)) + (47.5,)


def test_a_windows_mean_weighs_its_requests_not_its_blocks():
    values = [1.0] * 40 + [3.0] * 8     # 12 blocks of 4; the last two windows hold the 3s
    assert window_means(values, block=4)[-2:] == (3.0, 3.0)
    assert math.fsum(window_means(values, block=4)) / 12 == pytest.approx(sum(values) / len(values))


def test_the_between_session_spread_adds_to_the_variance_and_names_its_comparisons():
    rng = np.random.default_rng(3)
    a, b = Blocks.of(rng.lognormal(0, 0.2, 600)), Blocks.of(rng.lognormal(0, 0.2, 600))
    plain = bootstrap_ratio(a, b, "mean", seed=0)
    wider = bootstrap_ratio(a, b, "mean", seed=0, between=(0.02 ** 2, 6.0))
    assert wider.ratio == plain.ratio
    assert wider.se_log ** 2 == pytest.approx(plain.se_log ** 2 + 0.0004)
    # Welch-Satterthwaite: a spread from 6 comparisons that dominates leaves about 6 df, not a normal.
    dominant = bootstrap_ratio(a, b, "mean", seed=0, between=(0.1 ** 2, 6.0))
    assert dominant.df == pytest.approx(6.0, rel=0.05)
    assert "between sessions of one build (0.02 in log, from 6 A/A comparison(s))" in wider.method


def _comparison(key: str, offsets: dict, build: str = "rev1") -> Comparison:
    return Comparison(key, "2026-12-01T00:00:00Z", build, "base", offsets)


def test_the_between_session_variance_is_the_offsets_square_less_their_own_noise_per_comparison():
    history = [
        _comparison("r1", {"ttft_mean": {"a@1": (0.03, 0.0001), "b@1": (-0.01, 0.0001)}}),   # (0.0009+0.0001)/2 - 0.0001
        _comparison("r2", {"ttft_mean": {"a@1": (0.02, 0.0002)}, "tpot_mean": {"a@1": (0.001, 0.0004)}}),
    ]
    var, df = aa_offsets.between(history, "ttft_mean")
    assert var == pytest.approx(((0.0005 - 0.0001) + (0.0004 - 0.0002)) / 2)
    # Satterthwaite: k s_b^4 / (s_b^2 + v)^2 with v the comparisons' mean own noise (0.00015): the
    # comparisons count as one each (their points share two sessions), less what their noise hides.
    assert 2 * 0.0003 ** 2 / 0.00045 ** 2 < 1.0 and df == 1.0     # 0.89: at least one degree of freedom
    three = history + [_comparison("r3", {"ttft_mean": {"a@1": (0.04, 0.0001)}})]   # 0.0016 - 0.0001
    var3, df3 = aa_offsets.between(three, "ttft_mean")
    assert var3 == pytest.approx(0.0021 / 3)
    assert df3 == pytest.approx(3 * var3 ** 2 / (var3 + 0.0004 / 3) ** 2) and 1.0 < df3 < 3.0
    # Offsets smaller than their own noise say the sessions did not differ: zero, never negative.
    assert aa_offsets.between(history, "tpot_mean") == (0.0, 1.0)
    assert aa_offsets.between(history, "e2e_mean") is None
    # Noise-free offsets: every comparison is a whole degree of freedom.
    exact = [_comparison(f"r{i}", {"ttft_mean": {"a@1": (0.02, 0.0)}}) for i in range(5)]
    assert aa_offsets.between(exact, "ttft_mean") == (pytest.approx(0.0004), pytest.approx(5.0))


def test_the_history_keeps_the_newest_comparisons_and_a_rejudged_run_replaces_its_own():
    history = [_comparison(f"r{i}", {}) for i in range(12)]
    kept = aa_offsets.appended(history, _comparison("new", {}))
    assert len(kept) == aa_offsets.HISTORY == 12 and kept[0].key == "r1" and kept[-1].key == "new"
    again = aa_offsets.appended(kept, _comparison("r5", {"ttft_mean": {"a@1": (0.1, 0.0)}}))
    assert [c.key for c in again].count("r5") == 1 and again[-1].offsets and len(again) == 12


def test_only_the_baselines_own_build_is_an_a_a_comparison():
    base = baseline_from_summaries([run(96, seed=1)], source="recorded", run_id="base", build="rev1")
    assert aa_offsets.is_aa(base, "rev1")
    assert not aa_offsets.is_aa(base, "rev2")       # another build: a real comparison
    assert not aa_offsets.is_aa(base, "")           # build unknown (a rolling update part-way)
    unbuilt = baseline_from_summaries([run(96, seed=1)], source="recorded", run_id="base")
    assert not aa_offsets.is_aa(unbuilt, "rev1")


def test_a_recorded_baseline_keeps_its_windows_and_build_through_its_document():
    base = baseline_from_summaries([run(96, seed=1)], source="recorded", run_id="base", build="rev1",
                                   keep_samples=False)
    back = loads_baseline(dumps_baseline(base))
    assert back.build == "rev1"
    windows = back.entries[0].windows
    assert set(windows) == {"ttft_mean", "tpot_mean", "e2e_mean"} and all(len(w) == 12 for w in windows.values())
    assert math.fsum(windows["ttft_mean"]) / 12 == pytest.approx(back.entries[0].figures["ttft_mean"], rel=1e-9)


def test_offsets_of_an_unchanged_build_are_its_log_ratio_and_its_own_variance():
    base = baseline_from_summaries([run(240, seed=1, concurrency=4)], source="recorded", run_id="base", build="rev1")
    cand = run(240, seed=2, concurrency=4, ttft_ms=132.0)
    offsets = aa_offsets.offsets_of([cand], base, seed=0)
    d, v = offsets["ttft_mean"]["isl-3k@4"]
    assert d == pytest.approx(math.log(cand.ttft.mean / base.entries[0].figures["ttft_mean"]))
    assert 0 < v < 0.01 ** 2 * 9 and set(offsets) == {"ttft_mean", "tpot_mean", "e2e_mean"}


def test_a_malformed_history_is_named_with_the_fix():
    with pytest.raises(ConfigError, match=r"aa-offsets/x\.json: the A/A history is malformed .* delete it"):
        aa_offsets.loads_history('{"kind": "pdlift-aa-offsets", "version": 1, "comparisons": [{}]}',
                                 "aa-offsets/x.json")
    history = [_comparison("r1", {"ttft_mean": {"a@1": (0.03, 0.0001)}})]
    assert aa_offsets.loads_history(aa_offsets.dumps_history(history), "x") == history


def test_a_candidate_the_session_spread_leaves_undecided_is_not_passed_against_a_recorded_baseline():
    # Equal figures, thousands of requests each: within one session the ratio is known to about
    # 0.5%, so <= 1.05x PASSes; two sessions of this build have differed by about 3% (A/A), which the
    # interval must carry: then it cannot be shown within 1.05x.
    base = baseline_from_summaries([run(2000, seed=1, spread=0.05)], source="recorded", run_id="base", build="rev1")
    cand = run(2000, seed=2, spread=0.05)
    gate = gate_spec(GateRule(metric="ttft_mean", max_ratio=1.05, critical=True))
    assert evaluate_gate([cand], base, gate).outcome == Verdict.PASS
    history = [_comparison(f"r{i}", {"ttft_mean": {"isl-3k@8": (0.03 * (-1) ** i, 0.0)}}) for i in range(8)]
    drifting = aa_offsets.with_between(base, history)
    report = evaluate_gate([cand], drifting, gate)
    row = next(r for r in report.rows if r.metric == "ttft_mean")
    assert report.outcome == Verdict.INCONCLUSIVE and row.ci[1] > 1.05
    assert "from 8 A/A comparison(s)" in row.method
    # A clear regression is still a FAIL with the spread: it widens, it does not blind.
    slower = run(2000, seed=2, spread=0.05, ttft_ms=150.0)
    assert evaluate_gate([slower], drifting, gate).outcome == Verdict.FAIL


def test_a_run_whose_windows_drift_more_than_its_blocks_allow_reads_the_windows_spread():
    # One run with a slow half (the session drifted within itself): its 12 windows spread far wider
    # than resampling its blocks shows, so the gate reads them, with 11 df.
    base = baseline_from_summaries([run(960, seed=1, spread=0.02)], source="recorded", run_id="base")
    cand = run(960, seed=2, spread=0.02)
    steady = evaluate_gate([cand], base, gate_spec(GateRule(metric="tpot_mean", max_ratio=1.05, critical=True)))
    drifted = run(960, seed=2, spread=0.02, tpot_ms=12.0)
    samples = drifted.samples
    half = len(samples.tpot) // 2
    tpot = tuple(v * (1.06 if i >= half else 0.94) for i, v in enumerate(samples.tpot))
    from dataclasses import replace
    drifted = replace(drifted, samples=replace(samples, tpot=tpot))
    wide = evaluate_gate([drifted], base, gate_spec(GateRule(metric="tpot_mean", max_ratio=1.05, critical=True)))
    row = next(r for r in wide.rows if r.metric == "tpot_mean")
    steady_row = next(r for r in steady.rows if r.metric == "tpot_mean")
    assert "the candidate" in row.method and "repeats (or one run's windows) spread wider" in row.method
    assert "11 df" in row.method
    assert row.ci[1] - row.ci[0] > 3 * (steady_row.ci[1] - steady_row.ci[0])


def _report(outcome, *health):
    from tasks.planning.gate import GateReport, GateRow
    rows = tuple(GateRow("isl-3k", 8, metric, check, None, None, None, "", verdict, reason)
                 for metric, check, verdict, reason in health)
    return GateReport(outcome, (), rows, 0.95, 12, 0.01, "recorded", "base", 1)


def test_a_failed_an_untrusted_or_a_far_off_measurement_is_no_a_a_comparison():
    ok = [("error_rate", "errors", Verdict.PASS, ""), ("completed", "samples", Verdict.PASS, "")]
    near = {"ttft_mean": {"isl-3k@8": (0.05, 0.0001)}}
    limit = math.log(1.15)
    assert aa_offsets.unfit(_report(Verdict.PASS, *ok), near, limit) == ""
    assert aa_offsets.unfit(_report(Verdict.INCONCLUSIVE, *ok), near, limit) == ""   # undecided is still drift
    assert "FAILed" in aa_offsets.unfit(_report(Verdict.FAIL, *ok), near, limit)
    saturated = ok + [("client", "client", Verdict.INCONCLUSIVE, "the load generator saturated")]
    assert "client: the load generator saturated" in aa_offsets.unfit(_report(Verdict.PASS, *saturated), near, limit)
    # Either way, an offset as large as the tightest margin is a fault on one side: the boundary is in it.
    for d in (limit, -limit):
        assert "as far as the gate's tightest margin" in aa_offsets.unfit(
            _report(Verdict.PASS, *ok), {"tpot_mean": {"isl-3k@8": (d, 0.0)}}, limit)
    assert aa_offsets.unfit(_report(Verdict.PASS, *ok), {"tpot_mean": {"isl-3k@8": (limit * 0.999, 0.0)}}, limit) == ""
    assert aa_offsets.unfit(_report(Verdict.PASS, *ok), {"tpot_mean": {"isl-3k@8": (0.5, 0.0)}}, None) == ""


def test_a_percentile_carries_its_familys_between_session_spread_and_itl_tpots():
    from tasks.planning.gate import between_of
    base = baseline_from_summaries([run(96, seed=1)], source="recorded", run_id="base", build="rev1")
    history = [_comparison("r1", {"ttft_mean": {"isl-3k@8": (0.03, 0.0)}, "tpot_mean": {"isl-3k@8": (0.02, 0.0)}})]
    entry = aa_offsets.with_between(base, history).entries[0]
    assert between_of(entry, "ttft_p99") == between_of(entry, "ttft_mean") == (pytest.approx(0.0009), 1.0)
    assert between_of(entry, "itl_p99") == between_of(entry, "tpot_mean")
    assert between_of(entry, "e2e_mean") is None and between_of(entry, "output_tokens_per_s") is None


def test_describe_names_each_metrics_spread_or_says_there_is_none():
    assert "holds two sessions of one build equal" in aa_offsets.describe([])
    assert "holds two sessions of one build equal" in aa_offsets.describe([_comparison("r1", {})])
    text = aa_offsets.describe([_comparison("r1", {"ttft_mean": {"a@1": (0.02, 0.0)}})])
    assert text == "1 A/A comparison(s): between sessions ttft_mean 0.02 in log (1 df)"


def test_offsets_leave_out_skipped_scenarios():
    base = baseline_from_summaries([run(240, seed=1, concurrency=4)], source="recorded", run_id="base", build="rev1")
    assert aa_offsets.offsets_of([run(240, seed=2, concurrency=4)], base, skip=["isl-3k"]) == {}
