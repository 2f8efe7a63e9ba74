"""The benchmark stage with its load runner injected: what it runs, keeps, summarises and reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from blueprints.loader import load_blueprint
from tasks.adapters.loadgen import LoadResult, LoadSpec
from tasks.planning.metrics import RequestRecord
from tasks.stages import benchmark as bench

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def bp():
    doc = load_blueprint(REPO / "blueprints" / "sandbox-2p2d.yaml")
    return doc.model_copy(update={"benchmark": doc.benchmark.model_copy(update={"repeats": 2})})


def fake_load(saturate: tuple[str, int] | None = None, ttft_s: float = 0.1, tpot_s: float = 0.012):
    """A load runner that answers every spec with 30 well-formed requests (or flags saturation)."""
    seen: list[LoadSpec] = []

    def load(spec: LoadSpec) -> LoadResult:
        seen.append(spec)
        records = []
        for i in range(30):
            send = 100.0 + i
            chunks = tuple(send + ttft_s + k * tpot_s for k in range(spec.output_tokens))
            records.append(RequestRecord(spec.scenario, spec.concurrency, spec.repeat, send, chunks[0], chunks,
                                         chunks[-1] + 0.001, spec.input_tokens, spec.output_tokens))
        saturated = saturate == (spec.scenario, spec.concurrency)
        return LoadResult(spec=spec, model="m", records=tuple(records), warmup_requests=spec.concurrency,
                          duration_s=30.0, client_cpu_s=1.0, client_cpu_share=0.95 if saturated else 0.1,
                          loop_lag_mean_s=0.0005, loop_lag_p99_s=0.002, loop_lag_max_s=0.004, saturated=saturated,
                          saturation="client CPU at 95% of a core (> 90%)" if saturated else None,
                          input_lengths_exact=True, input_note="input length fitted", usage_missing=0, rate=None)

    load.seen = seen
    return load


def test_every_point_runs_repeats_outermost_and_every_request_is_kept(bp, tmp_path):
    load = fake_load()
    run = bench.run_benchmark(bp, "http://10.0.0.5:8080/", tmp_path, "r1", load=load)
    order = [(s.repeat, s.scenario, s.concurrency) for s in load.seen]
    assert order == [(r, s, c) for r in (0, 1) for s, cs in (("isl-3k", (1, 8)), ("isl-60k", (1, 4))) for c in cs]
    assert {s.base_url for s in load.seen} == {"http://10.0.0.5:8080"}
    assert {s.model for s in load.seen} == {bp.model.name}
    raw = json.loads((tmp_path / "raw" / "isl-3k-c8-r1.json").read_text())
    assert raw["kind"] == "pdlift-bench-raw" and len(raw["records"]) == 30 and raw["client"]["saturated"] is False
    summaries = {(s.scenario, s.concurrency): s for s in bench.read_results(run.results_path)}
    pooled = summaries[("isl-3k", 8)]
    assert pooled.completed == 60 and len(pooled.repeats) == 2           # repeats pooled, and kept apart
    assert pooled.ttft.mean == pytest.approx(100.0) and pooled.tpot.mean == pytest.approx(12.0)


def test_a_saturated_client_makes_its_point_inconclusive(bp, tmp_path):
    run = bench.run_benchmark(bp, "http://10.0.0.5:8080", tmp_path, "r2", load=fake_load(("isl-60k", 4)))
    summaries = bench.read_results(run.results_path)
    report = bench.judge(bp, summaries, bench.current_baseline(tmp_path / "state", bp))
    client = {(r.scenario, r.concurrency): r.verdict.value for r in report.rows if r.check == "client"}
    assert client[("isl-60k", 4)] == "INCONCLUSIVE" and client[("isl-3k", 8)] == "PASS"
    assert report.outcome.value == "INCONCLUSIVE"


def test_the_report_files_hold_the_verdict_the_notes_and_the_plot(bp, tmp_path):
    run = bench.run_benchmark(bp, "http://10.0.0.5:8080", tmp_path, "r3", load=fake_load(("isl-3k", 1)))
    summaries = bench.read_results(run.results_path)
    baseline = bench.current_baseline(tmp_path / "state", bp)     # no recorded one: the blueprint's figures
    report = bench.judge(bp, summaries, baseline)
    png, markdown = bench.write_report(tmp_path, report, {"outcome": report.outcome.value}, summaries, baseline,
                                       run.notes, "test")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert markdown.startswith(f"# Promotion gate: {report.outcome.value}")
    assert "client CPU at 95% of a core" in markdown and "data:image/png;base64," in markdown
    assert json.loads((tmp_path / "gate.json").read_text()) == {"outcome": report.outcome.value}
    assert baseline.source == bp.baseline.source


def test_a_recorded_baseline_wins_over_the_blueprint_figures(bp, tmp_path):
    from tasks.stages.promote import record_baseline

    run = bench.run_benchmark(bp, "http://10.0.0.5:8080", tmp_path / "bench", "r4", load=fake_load())
    path = record_baseline(tmp_path, bp, bench.read_results(run.results_path), "r4", "green")
    assert path == bench.baseline_path(tmp_path, bp.name)
    baseline = bench.current_baseline(tmp_path, bp)
    assert baseline.run_id == "r4" and baseline.lookup("isl-3k", 8).completed == 60


def test_a_sequential_benchmark_writes_its_stops_seed_and_family_beside_the_results(bp, tmp_path):
    from blueprints.schema import SequentialSpec
    from tasks.planning.bench_baseline import baseline_from_spec

    seq = bp.model_copy(update={"benchmark": bp.benchmark.model_copy(update={
        "repeats": 1, "sequential": SequentialSpec(rounds=3)})})
    load = fake_load()
    run = bench.run_benchmark(seq, "http://10.0.0.5:8080", tmp_path, "r5", load=load,
                              baseline=baseline_from_spec(seq.baseline), seed=77)
    assert bench.read_sequential(run.results_path) == {"seed": 77, "family": run_family(seq)}
    stops = bench.read_stops(run.results_path)
    assert stops == run.stops and {(s.scenario, s.concurrency) for s in stops} == {
        (s.name, c) for s in seq.benchmark.scenarios for c in s.concurrencies}
    assert {s.repeat for s in load.seen} <= {0, 1, 2} and all(s.duration_s < 10 for s in load.seen)
    # A fixed benchmark writes no sequential settings.
    fixed = bench.run_benchmark(bp, "http://10.0.0.5:8080", tmp_path / "fixed", "r6", load=fake_load())
    assert bench.read_sequential(fixed.results_path) == {} and bench.read_stops(fixed.results_path) == ()


def run_family(bp):
    from tasks.planning.bench_baseline import baseline_from_spec
    from tasks.planning.gate_sequential import critical_family

    return critical_family(bp.benchmark, bp.gate, baseline_from_spec(bp.baseline))
