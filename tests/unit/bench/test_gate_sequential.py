"""The sequential gate on synthetic streams: it stops early on a clear case, runs to the cap on a
borderline one, never decides on one early slow round, spends alpha as stated, holds the budget,
and a critical FAIL ends the whole benchmark."""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pytest
import yaml

from blueprints.loader import load_blueprint
from blueprints.schema import BenchmarkSpec, GateRule, Scenario, SequentialSpec, SloSpec
from tasks.errors import ConfigError
from tasks.planning.bench_baseline import baseline_from_summaries
from tasks.planning.bench_report import render_markdown
from tasks.planning.gate import Looks, Verdict, evaluate_gate, expected_points
from tasks.planning.gate_sequential import MIN_ROUNDS, Schedule, critical_family, levels, look
from tasks.planning.group_sequential import nominal_levels, spent
from tasks.planning.bench_stats import normal_quantile
from tasks.planning.metrics import summarize
from tests.unit.bench.helpers import gate_spec, record, run

TPOT = GateRule(metric="tpot_mean", max_ratio=1.10, critical=True)
ROUNDS = 6


def bench(*concurrencies: int, rounds: int = ROUNDS, budget: float | None = None, **more) -> BenchmarkSpec:
    return BenchmarkSpec(scenarios=[Scenario(name="isl-3k", input_tokens=3000, output_tokens=16,
                                             concurrencies=list(concurrencies or (8,)), duration_s=600,
                                             max_requests=1000, warmup_requests=3)],
                         sequential=SequentialSpec(rounds=rounds, spending=2.0), budget_minutes=budget, **more)


def baseline(concurrencies=(8,)):
    return baseline_from_summaries([run(600, seed=11 + c, spread=0.05, concurrency=c) for c in concurrencies],
                                   source="previous run")


def round_records(rnd, scale, seed, n=80, spread=0.05, outlier=1.0):
    """One round's requests: mean TPOT 12 ms x ``scale`` (log-normal, whatever the spread);
    ``outlier`` scales the whole round."""
    rng = random.Random(seed * 1000 + rnd.index)
    mean_tpot = 0.012 * math.exp(0.05 ** 2 / 2) * scale * outlier * math.exp(-spread ** 2 / 2)  # as the baseline's
    return [record(0.12 * rng.lognormvariate(0, spread), mean_tpot * rng.lognormvariate(0, spread), 16,
                   send_ts=float(rnd.index * n + i), concurrency=rnd.concurrency, repeat=rnd.index)
            for i in range(n)]


def drive(spec, gate, base, scale=lambda rnd: 1.0, seed=1, outlier=lambda rnd: 1.0, n=80, spread=0.05):
    """Run the schedule against a synthetic engine; returns it, the final report and the rounds run."""
    schedule = Schedule(spec, gate, base, seed=0)
    recs, ran = {}, []
    while (rnd := schedule.next()) is not None:
        ran.append(rnd)
        got = recs.setdefault(rnd.point, [])
        got += round_records(rnd, scale(rnd), seed, n=n, spread=spread, outlier=outlier(rnd))
        durations = {k: rnd.duration_s for k in range(rnd.index + 1)}
        summary = summarize(got, durations, SloSpec(), scenario=rnd.point[0], concurrency=rnd.point[1])
        schedule.record(rnd, summary, rnd.duration_s)
    summaries = [summarize(got, {k: spec.scenarios[0].duration_s / ROUNDS for k in range(1 + max(r.repeat for r in got))},
                           SloSpec(), scenario=p[0], concurrency=p[1]) for p, got in recs.items()]
    report = evaluate_gate(summaries, base, gate, expected=expected_points(spec), seed=0,
                           looks=schedule.looks, stops=schedule.stops)
    drive.summaries = summaries          # the last drive's, for the replay test
    return schedule, report, ran


# --- the spending -------------------------------------------------------------------------------


def _crossings(levels_, rounds, paths=200_000):
    """Monte Carlo of the canonical joint distribution: per look, the share of paths that first cross."""
    rng = np.random.default_rng(5)
    z = np.cumsum(rng.normal(0, math.sqrt(1 / rounds), (paths, rounds)), axis=1) / np.sqrt(np.arange(1, rounds + 1) / rounds)
    crit = np.array([normal_quantile(1 - lv) if lv > 0 else np.inf for lv in levels_])
    crossed = z >= crit
    first = np.where(crossed.any(axis=1), crossed.argmax(axis=1), -1)
    return [float(np.mean(first == k)) for k in range(rounds)]


@pytest.mark.parametrize("alpha", [0.05, 0.05 / 36])
def test_the_boundaries_spend_exactly_what_each_look_may_across_all_looks(alpha):
    lv = nominal_levels(alpha, 8, 2.0, 2)
    per_look = _crossings(lv, 8)
    assert lv[0] == 0.0 and per_look[0] == 0.0                   # the first look spends nothing
    assert sum(per_look) == pytest.approx(alpha, abs=4 * math.sqrt(alpha / 200_000))         # all looks together: alpha
    for k in (2, 8):
        share = spent(k, 8, alpha, 2.0, 2) - spent(k - 1, 8, alpha, 2.0, 2)
        assert per_look[k - 1] == pytest.approx(share, abs=4 * math.sqrt(share / 200_000))   # 4 Monte Carlo sd
    assert list(lv[1:]) == sorted(lv[1:]) and lv[-1] < alpha
    # Later looks get more than their share alone would give: the looks are correlated.
    assert lv[-1] > spent(8, 8, alpha, 2.0, 2) - spent(7, 8, alpha, 2.0, 2)


def test_one_look_is_the_fixed_test_and_nothing_is_spent_before_the_first_look():
    assert nominal_levels(0.05, 1, 2.0) == pytest.approx((0.05,), rel=1e-3)
    assert spent(1, 8, 0.05, 2.0, first=2) == 0.0 and spent(2, 8, 0.05, 2.0, first=2) == pytest.approx(0.05 / 16)
    assert spent(8, 8, 0.05, 2.0) == pytest.approx(0.05) and spent(4, 8, 0.05, 1.0) == pytest.approx(0.025)
    assert levels(0.05, 8, 2.0) == nominal_levels(0.05, 8, 2.0, MIN_ROUNDS)


def test_the_critical_family_counts_every_check_the_benchmark_could_make():
    spec = bench(1, 8)
    gate = gate_spec(TPOT, GateRule(metric="output_tokens_per_s", min_ratio=0.9, max_ratio=1.5, critical=True),
                     GateRule(metric="ttft_p99", max_ratio=1.2), GateRule(metric="tpot_mean", max_ratio=1.1,
                                                                          critical=True, report_only=True),
                     slo=SloSpec(ttft_ms=1000, tpot_ms=50))
    # 2 points x 2 SLOs, and 3 critical bounds at the one point the baseline covers.
    assert critical_family(spec, gate, baseline((8,))) == 2 * 2 + 1 * 3
    assert critical_family(spec, gate_spec(GateRule(metric="ttft_p99", max_ratio=1.2)), None) == 1


# --- decisions on streams -----------------------------------------------------------------------


def test_a_clear_regression_stops_early_with_a_fail():
    schedule, report, ran = drive(bench(), gate_spec(TPOT), baseline(), scale=lambda rnd: 1.5)
    (stop,) = schedule.stops
    assert report.outcome is Verdict.FAIL
    assert stop.reason == "decided" and stop.rounds == MIN_ROUNDS < ROUNDS and len(ran) == MIN_ROUNDS
    assert stop.alpha == pytest.approx(levels(0.05, ROUNDS, 2.0)[MIN_ROUNDS - 1])
    assert stop.alpha_critical == pytest.approx(levels(0.05 / schedule.family, ROUNDS, 2.0)[MIN_ROUNDS - 1])
    assert stop.load_s == pytest.approx(MIN_ROUNDS * 600 / ROUNDS)


def test_an_equal_candidate_stops_early_with_a_pass():
    schedule, report, ran = drive(bench(), gate_spec(TPOT), baseline())
    (stop,) = schedule.stops
    assert report.outcome is Verdict.PASS
    assert stop.reason == "decided" and stop.rounds < ROUNDS


def test_a_borderline_candidate_runs_to_its_cap_and_is_left_to_a_person():
    # At the 1.10 bound, with noisy requests: neither a FAIL nor a PASS (the 1.20 margin) is ever shown.
    schedule, report, ran = drive(bench(), gate_spec(TPOT, min_samples=20), baseline(), scale=lambda rnd: 1.10,
                                  n=20, spread=0.5)
    (stop,) = schedule.stops
    assert stop.reason == "cap" and stop.rounds == ROUNDS == len(ran)
    assert report.outcome is Verdict.INCONCLUSIVE
    assert "cap of 600 s (6 rounds)" in stop.note


def test_a_point_spends_no_alpha_at_looks_its_sample_count_cannot_judge():
    # 10 blocks a round against min_samples 40: the point can be judged from round 4 on. Looks 2
    # and 3 could only be INCONCLUSIVE, so they spend nothing, and round 4 gets all alpha due by
    # then (before, looks 2 and 3 spent their share for nothing and round 4 was stricter).
    schedule, report, ran = drive(bench(), gate_spec(TPOT, min_samples=40), baseline(), scale=lambda rnd: 1.5)
    (stop,) = schedule.stops
    assert report.outcome is Verdict.FAIL and stop.rounds == 4 == len(ran)
    family = schedule.family
    assert stop.alpha_critical == pytest.approx(levels(0.05 / family, ROUNDS, 2.0, first=4)[3])
    assert stop.alpha == pytest.approx(levels(0.05, ROUNDS, 2.0, first=4)[3])
    assert stop.alpha_critical > levels(0.05 / family, ROUNDS, 2.0)[3] * 1.2
    # One block short of judging at round 4: nothing decides until round 5, which spends from there.
    schedule, report, ran = drive(bench(), gate_spec(TPOT, min_samples=41), baseline(), scale=lambda rnd: 1.5)
    (stop,) = schedule.stops
    assert stop.rounds == 5 and stop.alpha_critical == pytest.approx(levels(0.05 / family, ROUNDS, 2.0, first=5)[4])


@pytest.mark.parametrize("seed", range(3))
def test_one_slow_first_round_never_decides_and_never_fails_an_equal_candidate(seed):
    # The whole first round 2x slower (a cold cache, a noisy neighbour), every later one equal.
    schedule, report, ran = drive(bench(), gate_spec(TPOT), baseline(), seed=seed,
                                  outlier=lambda rnd: 2.0 if rnd.index == 0 else 1.0)
    (stop,) = schedule.stops
    assert report.outcome is not Verdict.FAIL
    assert stop.rounds > 1


@pytest.mark.parametrize("factor", [20.0, 100.0])
def test_one_extreme_request_early_on_does_not_fail_an_equal_candidate(factor):
    spec = bench()
    schedule = Schedule(spec, gate_spec(TPOT), baseline(), seed=0)
    recs = []
    while (rnd := schedule.next()) is not None:
        got = round_records(rnd, 1.0, 4)
        if rnd.index == 0:
            first = got[0]
            slow = first.first_token_ts + (first.chunk_ts[-1] - first.first_token_ts) * factor
            got[0] = record(first.first_token_ts - first.send_ts, (slow - first.first_token_ts) / 15, 16,
                            send_ts=first.send_ts, concurrency=8, repeat=0)
        recs += got
        durations = {k: rnd.duration_s for k in range(rnd.index + 1)}
        seen = schedule.record(rnd, summarize(recs, durations, SloSpec(), scenario="isl-3k", concurrency=8),
                               rnd.duration_s)
        assert seen is None or not seen.failed
    (stop,) = schedule.stops
    assert stop.reason in ("decided", "cap") and stop.rounds >= MIN_ROUNDS


def test_a_single_round_is_never_enough_even_for_a_clear_fail():
    spec = bench(rounds=2)
    schedule = Schedule(spec, gate_spec(TPOT), baseline(), seed=0)
    rnd = schedule.next()
    recs = round_records(rnd, 3.0, 1)
    seen = schedule.record(rnd, summarize(recs, {0: 300.0}, SloSpec(), scenario="isl-3k", concurrency=8), 300.0)
    assert seen is None                             # no look after one round ...
    assert schedule.stops == () and schedule.next() is not None   # ... the point runs round 2


def test_a_critical_fail_at_one_point_stops_the_whole_benchmark():
    spec = bench(8, 16)
    schedule, report, ran = drive(spec, gate_spec(TPOT), baseline((8, 16)),
                                  scale=lambda rnd: 1.6 if rnd.concurrency == 8 else 1.0)
    stops = {st.concurrency: st for st in schedule.stops}
    assert report.outcome is Verdict.FAIL
    assert stops[8].reason == "decided" and stops[16].reason == "stopped"
    assert "FAILed at isl-3k @ concurrency 8" in stops[16].note
    assert len(ran) == MIN_ROUNDS                   # points run until decided: c=16 never started
    assert stops[16].rounds == 0


def test_a_non_critical_fail_decides_its_point_but_never_ends_the_benchmark():
    spec = bench(8, 16)
    gate = gate_spec(GateRule(metric="tpot_mean", max_ratio=1.10, critical=False),
                     GateRule(metric="ttft_mean", max_ratio=1.10, critical=True))
    schedule, report, ran = drive(spec, gate, baseline((8, 16)), scale=lambda rnd: 1.6 if rnd.concurrency == 8 else 1.0)
    stops = {st.concurrency: st for st in schedule.stops}
    assert stops[8].reason == "decided" and stops[16].reason == "decided"       # c=16 ran on to its own decision
    assert report.outcome is Verdict.INCONCLUSIVE                                # a person decides


def test_a_figure_without_a_noise_estimate_decides_nothing_before_the_last_look():
    # A throughput rule on one round: no spread to test, so the figure "stands", but only at the end.
    gate = gate_spec(GateRule(metric="output_tokens_per_s", min_ratio=0.9, critical=True), min_samples=20)
    one_round = run(600, seed=3, spread=0.05)                     # as many requests as the baseline's one run
    early = look(one_round, baseline(), gate, 0.01, 0.01, 1, 0, final=False)
    last = look(one_round, baseline(), gate, 0.01, 0.01, 1, 0, final=True)
    (row,) = [r for r in early.report.rows if r.metric == "output_tokens_per_s"]
    assert row.p_value is None and row.verdict is not Verdict.INCONCLUSIVE
    assert not early.decided and last.decided


def test_critical_checks_spend_alpha_split_over_the_family_and_the_others_alpha_whole():
    gate = gate_spec(TPOT, slo=SloSpec(ttft_ms=5000, tpot_ms=200))
    schedule, report, _ = drive(bench(), gate, baseline(), scale=lambda rnd: 1.5)
    (stop,) = schedule.stops
    assert schedule.family == 3                                     # two SLOs and the critical rule
    assert stop.alpha == pytest.approx(levels(0.05, ROUNDS, 2.0)[stop.rounds - 1])
    assert stop.alpha_critical == pytest.approx(levels(0.05 / 3, ROUNDS, 2.0)[stop.rounds - 1])
    assert stop.alpha_critical < stop.alpha / 2


def test_a_critical_check_fails_only_below_its_looks_boundary():
    gate = gate_spec(TPOT)
    candidate = run(120, seed=8, spread=0.3, tpot_ms=14.5)
    base = baseline()

    def tpot_row(critical_level):
        looks = Looks({("isl-3k", 8): 0.05}, {("isl-3k", 8): critical_level}, 1)
        (r,) = [r for r in evaluate_gate([candidate], base, gate, looks=looks).rows if r.metric == "tpot_mean"]
        return r

    p = tpot_row(0.5).p_value
    assert 0 < p < 0.05
    assert tpot_row(p * 1.01).verdict is Verdict.FAIL
    assert tpot_row(p).verdict is not Verdict.FAIL                 # strictly below
    assert tpot_row(p / 1.5).verdict is not Verdict.FAIL


def test_a_point_the_baseline_does_not_publish_stops_once_its_slos_are_decided():
    # A published baseline names one concurrency per scenario; the others hold to the SLOs only,
    # and a look at such a point alone must see it the same way the final report does.
    gate = gate_spec(TPOT, slo=SloSpec(tpot_ms=100), min_samples=10)   # c=16: 5 blocks a round
    schedule, report, _ = drive(bench(8, 16), gate, baseline((8,)))
    stops = {st.concurrency: st for st in schedule.stops}
    assert stops[16].reason == "decided" and stops[16].rounds == MIN_ROUNDS
    (ratio,) = [r for r in report.rows if (r.concurrency, r.metric, r.check) == (16, "tpot_mean", "ratio")]
    assert not ratio.gated and "not compared" in ratio.reason
    assert report.outcome is Verdict.PASS


# --- the rounds, the budget ---------------------------------------------------------------------


def test_points_run_until_decided_unless_rounds_are_asked_to_go_outermost():
    rounds = bench(8, 16).model_copy(update={"sequential": SequentialSpec(rounds=ROUNDS, order="rounds")})
    rounds_first = drive(rounds, gate_spec(TPOT), baseline((8, 16)))[2]
    assert [(r.concurrency, r.index) for r in rounds_first[:4]] == [(8, 0), (16, 0), (8, 1), (16, 1)]
    # ... where a FAIL at the first point still ends the benchmark: c=16 never gets that round.
    schedule, report, ran = drive(rounds, gate_spec(TPOT), baseline((8, 16)), scale=lambda rnd: 1.6)
    stops = {st.concurrency: st for st in schedule.stops}
    assert report.outcome is Verdict.FAIL and ran[-1].concurrency == 8
    assert stops[16].rounds == stops[8].rounds - 1 and stops[16].reason == "stopped"
    spec = bench(8, 16)
    assert spec.sequential.order == "points"
    schedule, report, ran = drive(spec, gate_spec(TPOT), baseline((8, 16)), scale=lambda rnd: 1.0)
    order = [(r.concurrency, r.index) for r in ran]
    eights = [o for o in order if o[0] == 8]
    assert order[:len(eights)] == [(8, k) for k in range(len(eights))] and len(eights) >= MIN_ROUNDS
    assert order[len(eights):] == [(16, k) for k in range(len(order) - len(eights))]
    # A clear FAIL at the first point ends it before the second point starts.
    schedule, report, ran = drive(spec, gate_spec(TPOT), baseline((8, 16)), scale=lambda rnd: 1.6)
    assert {r.concurrency for r in ran} == {8} and report.outcome is Verdict.FAIL
    assert {st.concurrency: st.rounds for st in schedule.stops}[16] == 0


def test_rounds_split_the_cap_and_only_the_first_warms_up():
    schedule = Schedule(bench(), gate_spec(TPOT), baseline())
    first = schedule.next()
    assert (first.duration_s, first.max_requests, first.warmup_requests, first.index) == (100.0, 167, 3, 0)
    schedule.record(first, run(80, seed=1), 100.0)
    second = schedule.next()
    assert (second.index, second.warmup_requests) == (1, 0)


def test_the_budget_holds_a_round_that_fits_exactly_and_refuses_one_that_does_not():
    # Rounds of 100 s; a budget of 200 s fits two exactly, not a third.
    schedule = Schedule(bench(budget=200 / 60), gate_spec(TPOT), baseline())
    for _ in range(2):
        rnd = schedule.next()
        schedule.record(rnd, run(10, seed=rnd.index), 100.0)   # too few samples: never decided
    assert schedule.next() is None
    (stop,) = schedule.stops
    assert stop.reason == "budget" and stop.rounds == 2 and "budget of 3.33 min" in stop.note


def test_without_sequential_the_repeats_run_at_full_length_and_the_budget_still_holds():
    spec = BenchmarkSpec(scenarios=[Scenario(name="isl-3k", input_tokens=3000, output_tokens=16, concurrencies=[1, 8],
                                             duration_s=60)], repeats=2, budget_minutes=3)
    schedule = Schedule(spec, gate_spec(TPOT), baseline())
    ran = []
    while (rnd := schedule.next()) is not None:
        ran.append((rnd.concurrency, rnd.index, rnd.duration_s))
        assert schedule.record(rnd, run(10, seed=1), 60.0) is None   # no looks
    assert ran == [(1, 0, 60), (8, 0, 60), (1, 1, 60)]              # repeats outermost; the fourth is over budget
    (stop,) = schedule.stops
    assert (stop.concurrency, stop.reason, stop.rounds) == (8, "budget", 1)
    # A budget that ends before a point's first run: the gate says why it has no results.
    spec = spec.model_copy(update={"budget_minutes": 1.5})
    schedule = Schedule(spec, gate_spec(TPOT), baseline())
    rnd = schedule.next()
    schedule.record(rnd, run(10, seed=1), 60.0)
    assert schedule.next() is None
    report = evaluate_gate([run(60, seed=2, concurrency=1)], baseline(), gate_spec(TPOT),
                           expected=expected_points(spec), stops=schedule.stops)
    (missing,) = [r for r in report.rows if r.check == "results"]
    assert missing.concurrency == 8 and missing.verdict is Verdict.INCONCLUSIVE
    assert "budget of 1.5 min" in missing.reason


def test_sequential_rounds_replace_repeats():
    with pytest.raises(ValueError, match="repeats"):
        bench(repeats=3)
    assert bench(repeats=1).sequential.rounds == ROUNDS


def test_a_blueprint_that_sets_both_is_refused_naming_the_field(tmp_path):
    doc = yaml.safe_load((Path(__file__).resolve().parents[3] / "blueprints" / "glm51-fp8-2p2d.yaml").read_text())
    doc["benchmark"]["sequential"] = {"rounds": 4}
    doc["benchmark"]["repeats"] = 3
    path = tmp_path / "bp.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match="benchmark.*repeats"):
        load_blueprint(path)


def test_the_report_shows_how_each_point_was_decided():
    schedule, report, _ = drive(bench(8, 16), gate_spec(TPOT), baseline((8, 16)),
                                scale=lambda rnd: 1.6 if rnd.concurrency == 8 else 1.0)
    text = render_markdown(report)
    assert "## How the decision was reached" in text
    assert "| isl-3k | 8 | 2 | 200 s | a critical check FAILed at round 2 |" in text
    assert "tpot_mean [" in text and "This benchmark was sequential" in text
    assert f"split it over all {report.critical_tests} the benchmark could make" in text and report.critical_tests == 2


# --- what the review found: few rounds, errors, replay --------------------------------------------


def test_a_variance_from_few_repeats_is_read_with_students_t():
    from tasks.planning.bench_stats import RatioTest, satterthwaite, normal_quantile, t_quantile

    assert satterthwaite((0.01, None), (0.0, None)) is None                    # bootstraps only: normal
    assert satterthwaite((0.01, 2.0), (0.0, None)) == pytest.approx(2.0)       # one side's 3 repeats
    assert satterthwaite((0.01, 2.0), (0.01, 2.0)) == pytest.approx(4.0)       # Welch-Satterthwaite
    wide, narrow = RatioTest(1.0, 0.1, "m", df=2.0), RatioTest(1.0, 0.1, "m")
    assert wide.bounds(0.95)[1] == pytest.approx(math.exp(t_quantile(0.95, 2.0) * 0.1))
    assert narrow.bounds(0.95)[1] == pytest.approx(math.exp(normal_quantile(0.95) * 0.1))
    assert wide.p_beyond(0.8, True) > narrow.p_beyond(0.8, True)


def test_a_point_cut_after_one_round_is_not_judged():
    spec = bench(budget=150 / 60)                                     # one 100 s round fits, a second does not
    schedule = Schedule(spec, gate_spec(TPOT), baseline(), seed=0)
    rnd = schedule.next()
    summary = summarize(round_records(rnd, 2.0, 1), {0: 100.0}, SloSpec(), scenario="isl-3k", concurrency=8)
    schedule.record(rnd, summary, 100.0)
    assert schedule.next() is None
    report = evaluate_gate([summary], baseline(), gate_spec(TPOT), looks=schedule.looks, stops=schedule.stops)
    (tpot,) = [r for r in report.rows if r.metric == "tpot_mean" and r.check == "ratio"]
    assert tpot.verdict is Verdict.INCONCLUSIVE and "only 1 round measured" in tpot.reason
    assert report.outcome is Verdict.INCONCLUSIVE                       # twice as slow, but one round


def test_errors_over_the_ceiling_end_a_point_early_only_beyond_chance():
    from tasks.planning.gate_sequential import errors_beyond

    assert errors_beyond(0, 1000, 0.01) == 1.0 and errors_beyond(1, 10, 0.0) == 0.0
    # P(X >= 2) for 10 requests at a 10% rate, by hand: 1 - 0.9^10 - 10 x 0.1 x 0.9^9.
    assert errors_beyond(2, 10, 0.1) == pytest.approx(1 - 0.9 ** 10 - 10 * 0.1 * 0.9 ** 9)
    assert errors_beyond(12, 1000, 0.01) > 0.2                          # 1.2%: could be a 1% rate's luck
    assert errors_beyond(60, 1000, 0.01) < 1e-10
    gate = gate_spec(TPOT, max_error_rate=0.01)
    rnd = Schedule(bench(), gate, baseline()).next()
    # 19 errors in 1000 at a 1% ceiling: p = 0.0069, above this look's 0.005; 20: p = 0.0033, below.
    for errors, early in ((15, False), (19, False), (20, True), (40, True)):
        ok = round_records(rnd, 1.0, 1, n=1000 - errors)
        records = [record(0, 0, 0, error="HTTP 500", send_ts=float(i), repeat=0) for i in range(errors)] + ok
        summary = summarize(records, {0: 100.0, 1: 100.0}, SloSpec(), scenario="isl-3k", concurrency=8)
        seen = look(summary, baseline(), gate, 0.01, 0.005, 1, 0, final=False)
        assert seen.failed is early
        assert look(summary, baseline(), gate, 0.01, 0.005, 1, 0, final=True).failed   # a fact at the end


def test_the_stage_replays_the_schedules_verdict_and_a_run_without_stops_is_judged_at_full_length(tmp_path):
    from tasks.stages import benchmark as stage

    schedule, report, _ = drive(bench(8, 16), gate_spec(TPOT), baseline((8, 16)),
                                scale=lambda rnd: 1.6 if rnd.concurrency == 16 else 1.0)
    bp = load_blueprint(Path(__file__).resolve().parents[3] / "blueprints" / "sandbox-2p2d.yaml")
    bp = bp.model_copy(update={"benchmark": bench(8, 16), "gate": gate_spec(TPOT)})
    replay = stage.judge(bp, drive.summaries, baseline((8, 16)), seed=0, stops=schedule.stops, family=schedule.family)
    assert replay.rows == report.rows and replay.outcome is report.outcome is Verdict.FAIL
    assert replay.critical_tests == schedule.family
    # A sequential blueprint's results that carry no stops were measured at full length: Holm, not level 0.
    slow = run(300, seed=9, tpot_ms=18.0, concurrency=8)
    assert stage.judge(bp, [slow], baseline((8, 16))).outcome is Verdict.FAIL
