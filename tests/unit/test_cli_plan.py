"""`pdlift validate` and `pdlift plan` as an operator runs them: real processes, exit codes, output."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BLUEPRINTS = [ROOT / "blueprints" / "glm51-fp8-2p2d.yaml", ROOT / "blueprints" / "sandbox-2p2d.yaml"]


def pdlift(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli.main", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("blueprint", BLUEPRINTS, ids=lambda p: p.name)
def test_plan_exits_zero_and_shows_fit_capacity_transfer_cost_and_warnings(blueprint):
    out = pdlift("plan", str(blueprint))
    assert out.returncode == 0, out.stderr
    for heading in ("Memory fit per GPU", "Scenarios: KV capacity and transfer", "Cost", "Will create", "Warnings"):
        assert heading in out.stdout
    assert "$253.18/h" in out.stdout


@pytest.mark.parametrize("blueprint", BLUEPRINTS, ids=lambda p: p.name)
def test_plan_json_parses_and_carries_the_figures(blueprint):
    out = pdlift("plan", str(blueprint), "--json")
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["format_version"] == 1
    assert {r["role"] for r in plan["roles"]} == {"prefill", "decode"}
    assert all("weights_gb_per_gpu" in r and "kv_free_gb_per_gpu" in r for r in plan["roles"])
    assert all(s["kv_transfer_ms"] > 0 and s["decode_max_sequences"] > 0 for s in plan["scenarios"])
    assert plan["cost"]["usd_per_hour"] == pytest.approx(253.18)
    assert isinstance(plan["warnings"], list)


def test_reference_plan_shows_the_120k_capacity_and_transfer_time():
    plan = json.loads(pdlift("plan", str(BLUEPRINTS[0]), "--json").stdout)
    s120 = next(s for s in plan["scenarios"] if s["scenario"] == "isl-120k")
    assert s120["decode_max_sequences"] == 112
    assert s120["kv_transfer_ms"] == pytest.approx(21.96, abs=0.01)


def test_validate_a_bad_blueprint_exits_2_with_the_location_and_no_traceback(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(BLUEPRINTS[0].read_text().replace("kv_lora_rank: 512", "kv_lora_rnk: 512"))
    for command in ("validate", "plan"):
        out = pdlift(command, str(bad))
        assert out.returncode == 2
        assert f"{bad}:" in out.stderr and "did you mean 'kv_lora_rank'?" in out.stderr
        assert "Traceback" not in out.stderr and out.stdout == ""


def test_validate_a_good_blueprint_says_ok_and_what_its_gate_rules_mean():
    out = pdlift("validate", str(BLUEPRINTS[0]))
    assert out.returncode == 0 and "ok" in out.stdout
    assert "A ratio rule r is the margin itself" in out.stdout
    assert ("tpot_mean ≤ 1.15× baseline (critical): PASS needs its upper 95% bound at most 1.15; "
            "FAIL needs it significantly above 1.15") in out.stdout
    assert "undecided at the end of the budget: rolled back with the reason and the figures" in out.stdout


def test_published_figures_without_their_spread_are_refused_naming_the_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(BLUEPRINTS[0].read_text().replace("  cv: {ttft: 0.2, tpot: 0.05}\n", ""))
    out = pdlift("validate", str(bad))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "baseline" in out.stderr and "cv: published figures need their spread" in out.stderr
    bad.write_text(BLUEPRINTS[0].read_text().replace("completed: 4000, ", "", 1))
    out = pdlift("validate", str(bad))
    assert out.returncode == 2 and "baseline.scenarios.isl-3k[0].completed" in out.stderr


def test_missing_file_is_exit_2_not_a_traceback(tmp_path):
    out = pdlift("plan", str(tmp_path / "nope.yaml"))
    assert out.returncode == 2 and "cannot read file" in out.stderr and "Traceback" not in out.stderr


def test_suggest_gate_prints_a_paired_design_that_fits_or_says_what_it_needs(tmp_path):
    out = pdlift("plan", str(BLUEPRINTS[0]), "--suggest-gate")
    assert out.returncode == 0, out.stderr
    assert "The cheapest paired gate that decides for glm51-fp8-2p2d" in out.stdout
    assert "within benchmark.budget_minutes = 45" in out.stdout
    assert "gate:\n  paired:\n    window_s: 20\n    looks: 3\n" in out.stdout and "isl-3k@64: " in out.stdout
    assert "scripts/bench/gate_sim.py --paths paired" in out.stdout
    bare = tmp_path / "bare.yaml"
    bare.write_text(BLUEPRINTS[0].read_text().replace("    isl-120k:\n      - {concurrency: 8, completed: 1000, "
                                                      "ttft_ms_mean: 24500, tpot_ms_mean: 41}\n", ""))
    out = pdlift("plan", str(bare), "--suggest-gate")
    assert out.returncode == 2 and "baseline.scenarios.isl-120k: no published figure" in out.stderr
