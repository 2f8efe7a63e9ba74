"""A TTFT probe point run by the benchmark stage against a vLLM + NIXL stack of the engine stand-ins:
judged when the decode engine counted its KV transfers, not judged when decode computed the prompts
itself and no KV moved (the recompute fault)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from blueprints.loader import load_blueprint
from sandbox.engines.stacks import vllm_stack
from tasks.adapters.engine_http import EngineHttp
from tasks.adapters.loadgen import run_load
from tasks.planning.bench_baseline import baseline_from_summaries
from tasks.planning.bench_judge import Verdict
from tasks.planning.server_figures import TRANSFERS, Snapshot, figures
from tasks.stages import benchmark as bench

REPO = Path(__file__).resolve().parents[3]
PROBE = {"name": "probe", "input_tokens": 1000, "output_tokens": 2, "concurrencies": [4], "duration_s": 3,
         "max_requests": 200, "warmup_requests": 4, "ttft_probe": True}


def _blueprint(tmp_path: Path):
    doc = yaml.safe_load((REPO / "blueprints" / "sandbox-2p2d.yaml").read_text())
    doc["model"]["name"] = "m"                       # the stacks' --served-model-name
    doc["kv_transfer"].update(connector="nixl", nixl_mode="pull")   # NixlConnector: counted on decode
    doc["topology"]["prefill"] = {"nodes": 1, "tp": 8, "pp": 1}     # which takes no prefill pp
    doc["benchmark"] = {"repeats": 1, "scenarios": [PROBE]}
    doc["baseline"] = {"source": "the first run"}
    doc["gate"] = {"min_samples": 4, "slo": {"ttft_ms": 60000, "tpot_ms": 0.001},
                   "rules": [{"metric": "ttft_mean", "max_ratio": 1.5, "critical": True},
                             {"metric": "tpot_mean", "max_ratio": 1.01, "critical": True}]}
    path = tmp_path / "bp.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return load_blueprint(path)


def _measure(stack, bp, directory: Path):
    """The benchmark stage's load point with the stack's engines read around it."""
    def read(http: EngineHttp) -> Snapshot:
        return Snapshot({"prefill": tuple(http.metrics(stack.prefill + "/metrics")),
                         "decode": tuple(http.metrics(stack.decode + "/metrics"))})

    def around(point):
        with EngineHttp() as http:
            before = read(http)
            result = point()
            return result, figures("vllm", "nixl", [], before, [], read(http))

    run = bench.run_benchmark(bp, stack.router, directory, "r1", run_load, server=around)
    [summary] = bench.read_results(run.results_path)
    return summary


def test_a_probe_point_is_judged_with_its_transfers_counted_and_not_judged_without_them(module_engine_launcher,
                                                                                       tmp_path):
    bp = _blueprint(tmp_path)
    moved = _measure(vllm_stack(module_engine_launcher, connector="NixlConnector"), bp, tmp_path / "moved")
    assert moved.completed >= 16 and moved.server[TRANSFERS][0] >= moved.completed   # the warm-up transfers too
    baseline = baseline_from_summaries([moved], source="the first run")
    report = bench.judge(bp, [moved], baseline)
    rows = {(r.check, r.metric): r for r in report.rows}
    assert rows[("transfer", "kv_transfers")].verdict is Verdict.PASS
    assert rows[("ratio", "ttft_mean")].verdict is Verdict.PASS                 # the same run: within 1.5
    assert rows[("slo", "tpot_mean")].reason == "TTFT probe: tpot_mean not gated"   # 0.001 ms: never met
    assert report.outcome is Verdict.PASS, report.reasons

    recomputed = vllm_stack(module_engine_launcher, connector="NixlConnector",
                            decode_env={"PDLIFT_SANDBOX_FAULTS": json.dumps({"recompute": True})})
    alone = _measure(recomputed, bp, tmp_path / "alone")
    assert alone.completed >= 16 and alone.server[TRANSFERS][0] == 0
    report = bench.judge(bp, [alone], baseline)
    assert report.outcome is Verdict.INCONCLUSIVE
    ttft = next(r for r in report.rows if r.check == "ratio" and r.metric == "ttft_mean")
    assert ttft.verdict is Verdict.INCONCLUSIVE and ttft.reason.startswith(
        "not judged: TTFT probe: no KV transfer seen in vllm:nixl_xfer_time_seconds_count during the point "
        "(max_tokens 2 may be answered by prefill alone)")
