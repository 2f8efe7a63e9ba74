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
    assert results["equal"]["FAIL"] <= 1 / 12                      # 0% measured over 300 draws
    for regression in ("ttft+10%", "ttft-tail"):
        assert results[regression]["PASS"] == 0.0
    # A clear regression is mostly caught; a marginal one (5% past the bound) at least sometimes.
    assert results["ttft-tail"]["FAIL"] >= 0.5 and results["ttft+10%"]["FAIL"] > 0
    false_fail, false_pass, inconclusive = sim.worst(results)
    assert false_fail == results["equal"]["FAIL"] and false_pass == 0.0
    assert inconclusive == max(r["INCONCLUSIVE"] for r in results.values())


def test_the_last_line_is_the_worst_case_over_the_cases(capsys):
    assert _sim().main(["--draws", "2", "--workers", "1", "--cases", "equal", "ttft+10%"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("gate_sim: false_fail=") and " false_pass=" in last and " inconclusive=" in last


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
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("gate_sim_sequential: minutes_p95_pass=")
    assert " minutes_p95_fail=" in last and " false_fail=" in last and " false_pass=" in last
