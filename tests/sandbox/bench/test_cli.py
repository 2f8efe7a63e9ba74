"""`pdlift benchmark` against the production Service of the Kubernetes stand-in, and `pdlift gate`
on files, with its exit codes (0 PASS, 1 FAIL, 3 INCONCLUSIVE)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli.main import main
from tasks.planning.bench_baseline import loads_baseline, loads_results
from tests.timing import timing


@timing
def test_pdlift_benchmark_measures_the_production_service_and_can_save_the_baseline(candidate_env, capsys):
    stacks, bp = candidate_env, candidate_env.blueprint
    code = main(["benchmark", str(stacks.directory / "bp.yaml"), "--run-id", "cli-run", "--save-baseline"])
    out = capsys.readouterr().out
    assert code == 0
    row = next(line.split() for line in out.splitlines() if line.startswith("short"))
    assert row[1:4] == ["4", "40", "0"]                      # concurrency, completed, errors
    results = Path(next(line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("results:")))
    assert loads_results(results.read_text())[0].completed == 40
    raw = json.loads((results.parent / "raw" / "short-c4-r0.json").read_text())
    assert len(raw["records"]) == 40 and all(len(r["chunk_ts"]) == 8 for r in raw["records"])
    assert raw["input"]["exact"] and raw["client"]["saturated"] is False
    baseline = Path(next(line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("baseline:")))
    assert loads_baseline(baseline.read_text()).run_id == "cli-run" and baseline.name == f"{bp.name}.json"


@pytest.fixture
def blue_results(blue_baseline) -> Path:
    from tasks.stages.benchmark import bench_dir

    name = blue_baseline.stem
    return bench_dir(blue_baseline.parent.parent, name, "blue-run") / "results.json"


@pytest.mark.parametrize("gate, code, verdict", [
    ({}, 0, "PASS"),
    ({"rules": [{"metric": "tpot_mean", "max_ratio": 0.5, "critical": True}]}, 1, "FAIL"),
    ({"min_samples": 500}, 3, "INCONCLUSIVE"),
], ids=["same-run-passes", "half-the-tpot-fails", "too-few-samples-is-inconclusive"])
def test_pdlift_gate_judges_a_results_file_against_a_baseline_file(colour_stacks, blue_baseline, blue_results,
                                                                   tmp_path, capsys, gate, code, verdict):
    blueprint = colour_stacks.write_blueprint(f"gate-{code}.yaml", gate=gate)
    plot = tmp_path / "plot.png"
    assert main(["gate", str(blue_results), str(blue_baseline), "--blueprint", str(blueprint),
                 "--plot", str(plot)]) == code
    assert f"# Promotion gate: {verdict}" in capsys.readouterr().out
    assert plot.read_bytes()[:4] == b"\x89PNG"


def test_pdlift_gate_judges_with_the_a_a_history_it_is_given(colour_stacks, blue_baseline, blue_results, tmp_path,
                                                              capsys):
    from tasks.planning.aa_offsets import Comparison, dumps_history
    blueprint = colour_stacks.write_blueprint("gate-aa.yaml", gate={})
    # Sessions of this build have differed by 20% either way: the same run cannot be shown within the rules.
    history = tmp_path / "aa.json"
    history.write_text(dumps_history([Comparison(f"r{i}", "", "b", "blue", {m: {"x@1": (0.2 * (-1) ** i, 0.0)}
                                                                           for m in ("ttft_mean", "tpot_mean")})
                                      for i in range(6)]))
    assert main(["gate", str(blue_results), str(blue_baseline), "--blueprint", str(blueprint),
                 "--aa-history", str(history), "--json"]) == 3
    assert "from 6 A/A comparison(s)" in capsys.readouterr().out


def test_pdlift_rollback_deletes_the_candidate_and_refuses_the_live_colour(candidate_env, capsys):
    stacks, bp = candidate_env, candidate_env.blueprint
    path = str(stacks.directory / "bp.yaml")
    assert main(["rollback", path, "green"]) == 0
    assert f"rolled back green: deleted Deployment {bp.name}/router-green" in capsys.readouterr().out
    assert stacks.kube.get("apps/v1", "Deployment", "router-green", bp.name) is None
    assert main(["rollback", path, "blue"]) == 1          # production routes to blue
    assert "refusing to roll back blue" in capsys.readouterr().err
    assert stacks.kube.get("apps/v1", "Deployment", "router-blue", bp.name) is not None
