"""Server-side figures from the engines' and the DCGM exporter's metrics, in their real text format."""

from __future__ import annotations

import pytest

from blueprints.schema import GateRule
from tasks.parsing.prometheus import parse_prometheus
from tasks.planning.bench_baseline import baseline_from_summaries, dumps_results, loads_results
from tasks.planning.gate import evaluate_gate
from tasks.planning.metrics import metric_value
from tasks.planning.server_figures import EnginePod, ServerFigures, Snapshot, figures, pool
from tests.unit.bench.helpers import gate_spec, run

PODS = (EnginePod("prefill", "ns-blue", "prefill-0", "node-p0"), EnginePod("prefill", "ns-blue", "prefill-1", "node-p1"),
        EnginePod("decode", "ns-blue", "decode-0", "node-d0"))


def vllm_text(queue_sum: float, queue_count: float, xfer_sum: float = 0.0, xfer_count: float = 0.0,
              nbytes: float = 0.0, drafted: float | None = None, accepted: float = 0.0) -> str:
    """What vLLM's prometheus_client renders (labels engine, model_name; _total on counters)."""
    labels = 'engine="0",model_name="glm"'
    lines = [
        "# HELP vllm:request_queue_time_seconds Histogram of time spent in WAITING phase for request.",
        "# TYPE vllm:request_queue_time_seconds histogram",
        f'vllm:request_queue_time_seconds_bucket{{{labels},le="0.3"}} {queue_count}',
        f'vllm:request_queue_time_seconds_bucket{{{labels},le="+Inf"}} {queue_count}',
        f"vllm:request_queue_time_seconds_count{{{labels}}} {queue_count}",
        f"vllm:request_queue_time_seconds_sum{{{labels}}} {queue_sum}",
        f"vllm:nixl_xfer_time_seconds_count{{{labels}}} {xfer_count}",
        f"vllm:nixl_xfer_time_seconds_sum{{{labels}}} {xfer_sum}",
        f"vllm:nixl_bytes_transferred_count{{{labels}}} {xfer_count}",
        f"vllm:nixl_bytes_transferred_sum{{{labels}}} {nbytes:e}",
    ]
    if drafted is not None:
        lines += [f"vllm:spec_decode_num_drafts_total{{{labels}}} {drafted / 3}",
                  f"vllm:spec_decode_num_draft_tokens_total{{{labels}}} {drafted}",
                  f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}} {accepted}",
                  f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="0"}} {accepted}']
    return "\n".join(lines) + "\n"


def dcgm_text(*gpus: tuple[int, float, str | None]) -> str:
    """dcgm-exporter's default-counters line for GPU utilisation; a pod name when the kubelet
    pod-resources mapping is on (GPU operator default)."""
    lines = ["# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).", "# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
    for index, util, pod in gpus:
        mapping = f',container="engine",namespace="ns-blue",pod="{pod}"' if pod else ""
        lines.append(f'DCGM_FI_DEV_GPU_UTIL{{gpu="{index}",UUID="GPU-{index:08d}-aaaa",pci_bus_id="00000000:{index:02X}:00.0",'
                     f'device="nvidia{index}",modelName="NVIDIA H200",Hostname="n",'
                     f'DCGM_FI_DRIVER_VERSION="570.133.20"{mapping}}} {util}')
    return "\n".join(lines) + "\n"


def snap(prefill: str = "", decode: str = "", **gpus: str) -> Snapshot:
    return Snapshot({"prefill": tuple(parse_prometheus(prefill)), "decode": tuple(parse_prometheus(decode))},
                    {node.replace("_", "-"): tuple(parse_prometheus(text)) for node, text in gpus.items()})


def test_vllm_with_nixl_gives_queue_transfer_and_acceptance_as_differences_over_the_point():
    two_prefills_before = vllm_text(1.0, 10) + vllm_text(2.0, 10)
    two_prefills_after = vllm_text(3.0, 30) + vllm_text(6.0, 40)            # +2 s/20 and +4 s/30
    before = snap(two_prefills_before, vllm_text(0.5, 10, 0.1, 10, 10 * 2**20, drafted=300, accepted=200))
    after = snap(two_prefills_after, vllm_text(0.5, 60, 1.1, 60, 110 * 2**20, drafted=1800, accepted=1250))
    figs = figures("vllm", "nixl", PODS, before, [], after)
    assert figs.value("prefill_queue_ms_mean") == pytest.approx(6000.0 / 50)   # both prefill pods summed
    assert figs.value("decode_queue_ms_mean") == pytest.approx(0.0)            # 50 requests, no wait
    assert figs.value("kv_transfer_ms_mean") == pytest.approx(1000.0 / 50)
    assert figs.value("kv_transfer_mib_mean") == pytest.approx(100 / 50)
    # accepted / drafted over the point: the per-position counter is not counted again
    assert figs.value("spec_acceptance") == pytest.approx(1050 / 1500)


def test_without_speculative_decoding_or_with_mooncake_the_figures_say_why_they_are_missing():
    figs = figures("vllm", "mooncake", PODS, snap(vllm_text(0, 0), vllm_text(0, 0)), [],
                   snap(vllm_text(1, 10), vllm_text(1, 10)))
    assert figs.value("kv_transfer_ms_mean") is None and figs.value("spec_acceptance") is None
    assert any("MooncakeConnector exports no transfer metrics" in n for n in figs.notes)
    assert any(n.startswith("spec_acceptance: no drafted tokens") for n in figs.notes)


def test_a_counter_that_goes_backwards_is_no_figure():
    figs = figures("vllm", "nixl", PODS, snap(vllm_text(5.0, 50), vllm_text(0, 0)), [],
                   snap(vllm_text(1.0, 10), vllm_text(0, 0)))
    assert figs.value("prefill_queue_ms_mean") is None
    assert any("went backwards (an engine restarted" in n for n in figs.notes)
    # and a histogram that saw nothing is not a zero
    assert figs.value("decode_queue_ms_mean") is None
    assert any(n.startswith("decode_queue_ms_mean") and "observed nothing" in n for n in figs.notes)


def sglang_text(queue_sum: float, queue_count: float, kv_sum: float, kv_count: float, kv_mb: float = 0.0,
                accept: float = 0.0) -> str:
    labels = 'engine_type="prefill",model_name="glm",moe_ep_rank="0",pp_rank="0",tp_rank="0"'
    return "\n".join([
        "# TYPE sglang:queue_time_seconds histogram",
        f"sglang:queue_time_seconds_sum{{{labels}}} {queue_sum}",
        f"sglang:queue_time_seconds_count{{{labels}}} {queue_count}",
        "# TYPE sglang:per_stage_req_latency_seconds histogram",
        f'sglang:per_stage_req_latency_seconds_sum{{{labels},stage="prefill_bootstrap"}} {kv_sum * 7}',
        f'sglang:per_stage_req_latency_seconds_count{{{labels},stage="prefill_bootstrap"}} {kv_count * 3}',
        f'sglang:per_stage_req_latency_seconds_sum{{{labels},stage="prefill_transfer_kv_cache"}} {kv_sum}',
        f'sglang:per_stage_req_latency_seconds_count{{{labels},stage="prefill_transfer_kv_cache"}} {kv_count}',
        "# TYPE sglang:kv_transfer_total_mb gauge",
        f"sglang:kv_transfer_total_mb{{{labels}}} {kv_mb}",
        f"sglang:spec_accept_rate{{{labels}}} {accept}",
    ]) + "\n"


def test_sglang_reads_its_own_names_the_transfer_stage_only_and_ignores_gauges_never_set():
    before = snap(sglang_text(1.0, 10, 0.5, 10), sglang_text(0.0, 10, 0, 0))
    during = [snap(sglang_text(2.0, 20, 0.7, 20, kv_mb=0.0), sglang_text(0, 20, 0, 0)),   # no transfer yet
              snap(sglang_text(3.0, 30, 0.9, 30, kv_mb=60.0), sglang_text(0, 30, 0, 0, accept=0.0)),
              snap(sglang_text(4.0, 40, 1.1, 40, kv_mb=80.0), sglang_text(0, 40, 0, 0, accept=0.0))]
    after = snap(sglang_text(5.0, 50, 1.3, 50), sglang_text(0.4, 50, 0, 0))
    figs = figures("sglang", "mooncake", PODS, before, during, after)
    assert figs.value("prefill_queue_ms_mean") == pytest.approx(4000.0 / 40)
    assert figs.value("decode_queue_ms_mean") == pytest.approx(400.0 / 40)
    assert figs.value("kv_transfer_ms_mean") == pytest.approx(800.0 / 40)        # not the bootstrap stage
    assert figs.value("kv_transfer_mib_mean") == pytest.approx(70.0)             # the 0 before any transfer left out
    assert figs.value("spec_acceptance") is None
    assert any("sglang:spec_accept_rate" in n for n in figs.notes)


def test_gpu_utilisation_is_the_roles_gpus_only_when_the_exporter_maps_pods():
    # node-p0: the prefill pod holds GPUs 0-1 (mapped), GPU 2 belongs to someone else's pod;
    # node-d0: mapping off, every GPU of the node is the decode pod's.
    mapped = dcgm_text((0, 90, "prefill-0"), (1, 70, "prefill-0"), (2, 5, "other-job"))
    unmapped = dcgm_text((0, 40, None), (1, 60, None))
    during = [snap(node_p0=mapped, node_d0=unmapped), snap(node_p0=mapped, node_d0=unmapped)]
    figs = figures("vllm", "nixl", PODS, snap(), during, snap())
    assert figs.value("prefill_gpu_util") == pytest.approx(80.0)
    assert figs.value("decode_gpu_util") == pytest.approx(50.0)
    nothing = figures("vllm", "nixl", PODS, snap(), [snap()], snap())
    assert nothing.value("prefill_gpu_util") is None
    assert any("no DCGM_FI_DEV_GPU_UTIL from a DCGM exporter on the prefill nodes (node-p0, node-p1)" in n
               for n in nothing.notes)


def test_a_point_shorter_than_the_sampling_interval_reads_its_gauges_after_it():
    figs = figures("vllm", "nixl", PODS, snap(), [], snap(node_d0=dcgm_text((0, 33, None))))
    assert figs.value("decode_gpu_util") == pytest.approx(33.0)


def test_repeats_pool_as_sums_over_sums_and_the_figures_travel_with_the_results():
    a = ServerFigures({"prefill_queue_ms_mean": (100.0, 10.0)}, ("x",))
    b = ServerFigures({"prefill_queue_ms_mean": (900.0, 30.0), "decode_gpu_util": (50.0, 1.0)}, ("x", "y"))
    pooled = pool([a, b])
    assert pooled.value("prefill_queue_ms_mean") == pytest.approx(1000.0 / 40)   # not the mean of 10 and 30
    assert pooled.notes == ("x", "y")
    summary = run(100, seed=1).__class__(**{**run(100, seed=1).__dict__, "server": dict(pooled.values),
                                            "server_notes": pooled.notes})
    assert metric_value(summary, "prefill_queue_ms_mean") == pytest.approx(25.0)
    assert metric_value(summary, "kv_transfer_ms_mean") is None
    (back,) = loads_results(dumps_results([summary]))
    assert back.server == {"prefill_queue_ms_mean": (1000.0, 40.0), "decode_gpu_util": (50.0, 1.0)}
    assert back.server_notes == ("x", "y")


def _with_queue(summary, ms_per_repeat):
    reps = tuple(r.__class__(**{**r.__dict__, "server": {"prefill_queue_ms_mean": (ms, 1.0)}})
                 for r, ms in zip(summary.repeats, ms_per_repeat))
    total = sum(ms_per_repeat)
    return summary.__class__(**{**summary.__dict__, "repeats": reps,
                                "server": {"prefill_queue_ms_mean": (total, float(len(ms_per_repeat)))}})


def test_a_rule_on_a_server_figure_is_report_only_unless_it_says_otherwise():
    assert GateRule(metric="prefill_queue_ms_mean", max_ratio=1.2).report_only is True
    assert GateRule(metric="prefill_queue_ms_mean", max_ratio=1.2, report_only=False).report_only is False
    baseline = baseline_from_summaries([_with_queue(run(100, seed=1, repeats=3), (10.0, 10.5, 9.5))],
                                       source="previous run")
    candidate = _with_queue(run(100, seed=2, repeats=3), (20.0, 21.0, 19.0))   # queueing doubled
    shown = evaluate_gate([candidate], baseline, gate_spec(GateRule(metric="prefill_queue_ms_mean", max_ratio=1.2)))
    row = next(r for r in shown.rows if r.metric == "prefill_queue_ms_mean")
    assert row.verdict.value == "FAIL" and not row.gated and shown.outcome.value == "PASS"
    gated = evaluate_gate([candidate], baseline, gate_spec(
        GateRule(metric="prefill_queue_ms_mean", max_ratio=1.2, report_only=False, critical=True)))
    row = next(r for r in gated.rows if r.metric == "prefill_queue_ms_mean")
    assert row.ratio == pytest.approx(2.0) and "t test of log figures over 3 candidate repeats against the baseline's 3 repeats" in row.method
    assert gated.outcome.value == "FAIL"
