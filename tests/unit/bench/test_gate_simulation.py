"""The fast slice of scripts/bench/gate_sim.py: the real gate on simulated reference runs, a fixed seed."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "bench" / "gate_sim.py"


def _sim():
    spec = importlib.util.spec_from_file_location("gate_sim", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gate_sim", module)  # dataclasses look their module up by name
    spec.loader.exec_module(sys.modules["gate_sim"])
    return sys.modules["gate_sim"]


def test_the_gate_rarely_fails_an_equal_candidate_and_never_passes_a_clear_regression():
    sim = _sim()
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
    assert sim.main(["--draws", "1", "--workers", "1", "--cases", "equal", "ttft@margin", "--noise", "both"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-2].startswith("gate_sim[recorded,pessimistic]: pass_equal=")
    assert lines[-1].startswith("gate_sim[recorded]: pass_equal=") and " fail_ttft10=n/a " in lines[-1]
    assert lines[-1].endswith(" minutes_p95=270.0")                  # the fixed gate spends its whole plan


def test_the_sequential_gate_keeps_the_error_rates_and_never_loads_past_the_cap():
    sim = _sim()
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
                        "--critical-only", "--rounds", "4"]) == 0
    *_, last, recorded = capsys.readouterr().out.strip().splitlines()
    assert last.startswith("gate_sim_sequential: minutes_p95_pass=")
    assert " minutes_p95_fail=" in last and " false_fail=" in last and " false_pass=" in last
    # The recorded path's line is the sequential gate's: its load is what the rounds spent.
    assert recorded.startswith("gate_sim[recorded]: pass_equal=") and " minutes_p95=" in recorded
