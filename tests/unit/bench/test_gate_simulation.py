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
    assert results["equal"]["FAIL"] <= 1 / 12                      # 0.1% measured over 1,000 draws
    for regression in ("ttft+10%", "ttft-tail"):
        assert results[regression]["PASS"] == 0.0
        assert results[regression]["FAIL"] >= 0.5
    false_fail, false_pass, inconclusive = sim.worst(results)
    assert false_fail == results["equal"]["FAIL"] and false_pass == 0.0
    assert inconclusive == max(r["INCONCLUSIVE"] for r in results.values())


def test_the_last_line_is_the_worst_case_over_the_cases(capsys):
    assert _sim().main(["--draws", "2", "--workers", "1", "--cases", "equal", "ttft+10%"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("gate_sim: false_fail=") and " false_pass=" in last and " inconclusive=" in last
