"""The fast slice of scripts/bench/gate_sim.py: the real gate on simulated reference runs, a fixed seed."""

from __future__ import annotations

import importlib.util
import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "bench" / "gate_sim.py"


def _sim():
    spec = importlib.util.spec_from_file_location("gate_sim", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gate_sim", module)  # dataclasses look their module up by name
    spec.loader.exec_module(sys.modules["gate_sim"])
    return sys.modules["gate_sim"]


# The reference as it was before its paired design (9 points, 3 x 300/600/900 s, sequential in 6
# rounds, ttft_mean <= 1.07): the recorded path's tests keep it, their figures in docs/benchmarks.md.
SEQUENTIAL_REFERENCE = {
    "benchmark": {"sequential": {"rounds": 6}, "budget_minutes": 300, "scenarios": [
        {"name": "isl-3k", "input_tokens": 3000, "output_tokens": 512, "concurrencies": [64, 16, 1],
         "duration_s": 900, "max_requests": 6000},
        {"name": "isl-60k", "input_tokens": 60000, "output_tokens": 512, "concurrencies": [16, 8, 1], "duration_s": 1800},
        {"name": "isl-120k", "input_tokens": 120000, "output_tokens": 512, "concurrencies": [8, 4, 1],
         "duration_s": 2700}]},
    "points": {"isl-3k": [{"concurrency": 16, "completed": 1000, "ttft_ms_mean": 1450, "tpot_ms_mean": 28}],
               "isl-60k": [{"concurrency": 8, "completed": 1000, "ttft_ms_mean": 9800, "tpot_ms_mean": 34}],
               "isl-120k": [{"concurrency": 4, "completed": 1000, "ttft_ms_mean": 24500, "tpot_ms_mean": 41}]},
    "rules": [{"metric": "ttft_mean", "max_ratio": 1.07, "critical": True},
              {"metric": "ttft_p99", "max_ratio": 1.10, "report_only": True},
              {"metric": "tpot_mean", "max_ratio": 1.15, "critical": True},
              {"metric": "output_tokens_per_s", "min_ratio": 0.90, "report_only": True},
              {"metric": "itl_mean", "report_only": True}],
}


def _sequential_reference(tmp_path: Path):
    """gate_sim on ``SEQUENTIAL_REFERENCE`` (a copy of the reference with those sections)."""
    import yaml

    sim = _sim()
    doc = yaml.safe_load(sim.REFERENCE.read_text())
    doc["benchmark"] = SEQUENTIAL_REFERENCE["benchmark"]
    doc["baseline"]["scenarios"] = SEQUENTIAL_REFERENCE["points"]
    doc["gate"]["rules"] = SEQUENTIAL_REFERENCE["rules"]
    doc["gate"].pop("paired")
    path = tmp_path / "sequential-reference.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    sim.set_noise(sim.NOISE, {}, path)
    return sim


def test_the_gate_rarely_fails_an_equal_candidate_and_never_passes_a_clear_regression(tmp_path):
    sim = _sequential_reference(tmp_path)
    results = sim.simulate(["equal", "ttft+10%", "ttft-tail"], draws=12, seed=3, workers=1)
    assert results["equal"]["FAIL"] <= 1 / 12          # 0% over 200 draws, either model (docs/benchmarks.md)
    for regression in ("ttft+10%", "ttft-tail"):
        assert results[regression]["PASS"] == 0.0
    # A clear regression is mostly caught; a marginal one (just past the ttft_mean rule) at least sometimes.
    assert results["ttft-tail"]["FAIL"] >= 0.5 and results["ttft+10%"]["FAIL"] > 0
    false_fail, false_pass, inconclusive = sim.worst(results)
    assert false_fail == results["equal"]["FAIL"] and false_pass == 0.0
    assert inconclusive == max(r["INCONCLUSIVE"] for r in results.values())


def test_the_default_latency_model_has_the_tail_its_sources_publish():
    # sglang.bench_serving at concurrency 1: TTFT median 20.89 ms, p99 24.81 ms; TPOT 1.52 / 1.53 ms.
    ratios = _sim().tail_ratios("public")
    assert abs(ratios["ttft"] - 24.81 / 20.89) < 0.02       # 1.188; the 2% x3 tail gave about 3.0
    assert abs(ratios["tpot"] - 1.53 / 1.52) < 0.002         # 1.0066
    # The model before, kept as --noise pessimistic: its heavy tail sets p99 at about 3x the median.
    for family, ratio in _sim().tail_ratios("pessimistic").items():
        assert 2.7 < ratio < 3.3, family
    # The default spreads with queueing, as vllm bench serve on an L4 shows (TTFT p95/p50 1.28-1.45).
    loaded = _sim().tail_ratios("public", concurrency=32)
    assert 1.4 < loaded["ttft"] < 2.0 and 1.03 < loaded["tpot"] < 1.1


def test_the_last_lines_are_the_recorded_paths_default_model_last(capsys):
    sim = _sim()
    figures = sim.headline({"equal": {"PASS": 0.9, "FAIL": 0.0, "minutes_p95": 270.0},
                            "ttft+10%": {"PASS": 0.0, "FAIL": 0.75, "minutes_p95": 270.0},
                            "ttft@margin": {"PASS": 0.05, "FAIL": 0.0, "minutes_p95": 270.0},
                            "tpot@margin": {"PASS": 0.125, "FAIL": 0.0, "minutes_p95": 269.0}})
    assert sim.line("recorded", "public", figures) == (
        "gate_sim[recorded]: pass_equal=0.900 fail_ttft10=0.750 fail_tpot10=n/a pass_at_margin=0.125 "
        "minutes_p95=270.0")
    assert sim.line("paired", "public", figures).startswith("gate_sim: pass_equal=0.900 ")
    assert sim.line("recorded", "pessimistic", figures).startswith("gate_sim[recorded,pessimistic]: ")
    assert sim.line("paired", "pessimistic", figures).startswith("gate_sim[paired,pessimistic]: pass_equal=0.900 ")
    assert sim.main(["--draws", "1", "--workers", "1", "--cases", "equal", "ttft@margin", "--noise", "both"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-4].startswith("gate_sim[recorded,pessimistic]: pass_equal=")
    assert lines[-3].startswith("gate_sim[recorded]: pass_equal=") and " fail_ttft10=n/a " in lines[-3]
    assert lines[-3].endswith(" minutes_p95=44.5")                   # the fixed gate spends its whole plan
    assert lines[-2].startswith("gate_sim[paired,pessimistic]: pass_equal=")
    assert lines[-1].startswith("gate_sim: pass_equal=")              # the paired path, the default model, last


def test_the_sequential_gate_keeps_the_error_rates_and_never_loads_past_the_cap(tmp_path):
    sim = _sequential_reference(tmp_path)
    results = sim.simulate_sequential(["equal", "ttft-tail"], draws=3, seed=3, workers=1, critical_only=True)
    cap_minutes = 3 * (3 * 300 + 3 * 600 + 3 * 900) / 60               # the fixed gate's load: 270 min
    assert results["equal"]["FAIL"] == 0.0 and results["ttft-tail"]["PASS"] == 0.0
    for r in results.values():
        assert 0 < r["minutes_mean"] <= r["minutes_p95"] <= cap_minutes
        assert sum(r[v] for v in ("PASS", "FAIL", "INCONCLUSIVE")) == 1.0
    # The clear regression is decided before the cap: a critical FAIL ends the benchmark.
    assert results["ttft-tail"]["FAIL"] > 0 and results["ttft-tail"]["minutes_mean"] < cap_minutes


def test_the_sequential_last_line_names_the_load_time_and_the_error_rates(capsys):
    assert _sim().main(["--sequential", "--draws", "1", "--workers", "1", "--cases", "equal", "ttft+10%",
                        "--critical-only", "--rounds", "4", "--paths", "recorded"]) == 0
    *_, last, recorded = capsys.readouterr().out.strip().splitlines()
    assert last.startswith("gate_sim_sequential: minutes_p95_pass=")
    assert " minutes_p95_fail=" in last and " false_fail=" in last and " false_pass=" in last
    # The recorded path's line is the sequential gate's: its load is what the rounds spent.
    assert recorded.startswith("gate_sim[recorded]: pass_equal=") and " minutes_p95=" in recorded


# --- the paired path: both colours live, judged by tasks.planning.gate_paired ---------------------

PAIRED_LINE = re.compile(r"gate_sim: pass_equal=[01]\.\d{3} fail_ttft10=[01]\.\d{3} fail_tpot10=[01]\.\d{3} "
                         r"pass_at_margin=[01]\.\d{3} minutes_p95=\d+\.\d")


def test_the_paired_path_runs_end_to_end_and_prints_its_line_last(capsys):
    sim = _sim()
    assert sim.main(["--paths", "paired", "--draws", "2", "--workers", "1", "--seed", "3",
                     "--cases", "equal", "ttft+10%", "tpot+10%", "ttft@margin", "tpot@margin"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert PAIRED_LINE.fullmatch(out[-1]), out[-1]
    assert not any(line.startswith("gate_sim[recorded") for line in out)     # --paths paired: that path alone
    minutes = float(out[-1].rsplit("=", 1)[1])
    assert 0 < minutes <= sim.design_of_blueprint(sim.REFERENCE).cap_minutes + 0.05   # a look's share of 44.5 min


def test_the_paired_path_simulates_the_blueprints_own_design_with_the_windows_the_product_cuts(tmp_path):
    import yaml

    sim = _sim()
    design = sim.design_of_blueprint(sim.REFERENCE)
    assert [(s, c, m) for s, c, m in design.points] == [("isl-3k", 64, 18.5), ("isl-60k", 16, 9.0),
                                                        ("isl-120k", 8, 17.0)]
    # Windows of at least 3 requests' time (18.8, 28.5 and 46.5 s end to end under the load model):
    # 6, 2 and 2 a round of duration_s / 3.
    assert design.windows == (18, 6, 6) and (design.margin, design.guard, design.looks) == (1.05, 1.2, 3)
    assert dict(design.weights)["ttft"] == (0.74, 0.145, 0.117)
    plan = sim.paired_plan(design, "public", sim.REFERENCE)
    assert math.isclose(plan.weights["ttft"][("isl-3k", 64)], 0.74 / (0.74 + 0.145 + 0.117))
    doc = yaml.safe_load(sim.REFERENCE.read_text())
    doc["benchmark"]["scenarios"][1]["duration_s"] = 500          # rounds of 167 s: one 85 s window each
    short = tmp_path / "short.yaml"
    short.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(SystemExit, match="isl-60k@16's rounds of 167 s hold 1 window"):
        sim.design_of_blueprint(short)


def test_the_paired_design_is_the_studys_p45_with_weights_from_the_model():
    sim = _sim()
    design = sim.DESIGN_P45
    assert [(s, c) for s, c, _ in design.points] == [("isl-3k", 64), ("isl-60k", 16), ("isl-120k", 8)]
    assert math.isclose(design.cap_minutes, 42.3) and design.windows == (18, 18, 18)
    from tasks.planning.gate_paired import Levels

    plan = sim.paired_plan(design, "pessimistic", sim.REFERENCE)
    assert [c.margin for c in plan.checks] == [1.05, 1.05] + [1.20] * 6          # two contracts, six guards
    assert plan.levels == Levels.of(0.05, 3, 2.0, 8)
    # The study computed its weights under the model of the time, now --noise pessimistic: 0.86/0.07/0.07.
    for ours, study in zip(plan.weights["ttft"].values(), sim.STUDY_TTFT_WEIGHTS):
        assert abs(ours - study) < 0.01
    for family in ("ttft", "tpot"):
        assert math.isclose(sum(sim.paired_plan(design, "public", sim.REFERENCE).weights[family].values()), 1.0)


def test_in_the_paired_path_common_drift_cancels_and_a_clear_regression_fails(monkeypatch):
    sim = _sim()
    from tasks.planning.gate_paired import WindowSums, jackknife

    # A window's drift of 50% (log-sigma 0.5), both colours alike: the baseline's own window means
    # swing by that much, the paired ratio hardly moves.
    plan = sim.paired_plan(sim.DESIGN_P45, "public", sim.REFERENCE)
    sums = sim._paired_windows(np.random.default_rng(5), plan, sim.CASES["equal"], 0.5, sim.NOISES["public"])
    rows = sums["ttft"][("isl-3k", 64)]
    assert np.std(np.log(rows[:, 2] / rows[:, 3])) > 0.3
    assert jackknife([WindowSums(*map(float, r)) for r in rows]).se < 0.02
    verdicts = [sim.compare_paired("equal", d, 3, drift=0.5)[0] for d in range(4)]
    assert verdicts == ["PASS"] * 4
    # Mean TTFT 30% worse at every point: FAILed, and at the first look (a third of the cap).
    monkeypatch.setitem(sim.PAIRED_CASES, "ttft+30%", sim.Case("ttft+30%", regression=True, ttft_scale=1.30))
    for d in range(3):
        verdict, minutes, k = sim.compare_paired("ttft+30%", d, 3, drift=0.5)
        assert verdict == "FAIL" and k == 1 and math.isclose(minutes, sim.DESIGN_P45.cap_minutes / 3)


def test_the_recorded_path_judges_against_a_baseline_with_the_a_a_history_the_product_would_have():
    import numpy as np
    sim = _sim()
    bp = sim.fixed_blueprint(sim._load(sim.REFERENCE))
    with_history = sim.recorded_baseline(bp, np.random.default_rng(1))
    spread, df = with_history.entries[0].between["ttft_mean"]
    assert with_history.build and spread > 0 and 1.0 <= df <= sim.AA_COMPARISONS
    try:
        sim.set_noise(sim.NOISE, aa=0)
        assert sim.recorded_baseline(bp, np.random.default_rng(1)).entries[0].between == {}
    finally:
        sim.set_noise(sim.NOISE, aa=8)
    # Twice the margin is a regression; its FAIL rate is the recorded line's last figure.
    assert sim.CASES["tpot@2margin"].on(bp.gate).tpot_scale == pytest.approx(1.30)
    figures = sim.headline({"equal": {"PASS": 0.9, "FAIL": 0.0, "minutes_p95": 44.5},
                            "ttft@2margin": {"PASS": 0.0, "FAIL": 0.95, "minutes_p95": 44.5},
                            "tpot@2margin": {"PASS": 0.0, "FAIL": 0.91, "minutes_p95": 44.5}})
    assert sim.line("recorded", "public", figures).endswith(" minutes_p95=44.5 fail_twice_margin=0.910")
