"""An SGLang prefill + decode + sglang_router stack over NIXL (LIBFABRIC): the KV path and its checks."""

from __future__ import annotations

import pytest

from sandbox.engines.latency import LatencyModel
from sandbox.engines.tokenizer import make_prompt

from tests.timing import timing
from .client import best_ttft, completion, metric, metrics, run
from sandbox.engines.stacks import sglang_stack
from sandbox.nodes import efa_counters

MODEL = LatencyModel()


@pytest.fixture(scope="module")
def stack(module_engine_launcher):
    return sglang_stack(module_engine_launcher)


def test_a_streamed_completion_through_the_sglang_router_returns_n_tokens_with_usage(stack):
    [result] = run(stack.router + "/v1/completions", [completion(make_prompt(3000), 10)])
    assert result.status == 200 and result.done and len(result.texts) == 10
    assert result.usage["prompt_tokens"] == 3000 and result.usage["completion_tokens"] == 10


@timing
def test_ttft_through_the_sglang_router_is_prefill_plus_transfer(stack):
    ttft = best_ttft(stack.router + "/v1/completions", [make_prompt(3000, seed=i) for i in range(5)])
    assert ttft == pytest.approx(MODEL.ttft_s(3000, pd=True, kv_cache_dtype="fp8_e4m3"), rel=0.05)


def stage_count(samples: dict, stage: str) -> float:
    return metric(samples, "sglang:per_stage_req_latency_seconds_count", stage=stage)


def test_kv_moves_over_efa_with_the_nixl_libfabric_backend(stack):
    """SGLang's NIXL writes: rdma_write_bytes on the prefill's node, rdma_write_recv_bytes on the
    decode's; each side counts one transfer stage per request and no failure."""
    p0, d0 = efa_counters.read(stack.prefill_node), efa_counters.read(stack.decode_node)
    stages0 = stage_count(metrics(stack.prefill), "prefill_transfer_kv_cache"), \
        stage_count(metrics(stack.decode), "decode_transferred")
    [result] = run(stack.router + "/v1/completions", [completion(make_prompt(1000), 2)])
    assert result.status == 200
    expected = MODEL.kv_bytes(1000, "fp8_e4m3")
    assert efa_counters.read(stack.prefill_node)["rdma_write_bytes"] - p0["rdma_write_bytes"] == expected
    assert efa_counters.read(stack.decode_node)["rdma_write_recv_bytes"] - d0["rdma_write_recv_bytes"] == expected
    decode, prefill = metrics(stack.decode), metrics(stack.prefill)
    assert stage_count(prefill, "prefill_transfer_kv_cache") - stages0[0] == 1
    assert stage_count(decode, "decode_transferred") - stages0[1] == 1
    for samples in (prefill, decode):
        assert metric(samples, "sglang:num_transfer_failed_reqs_total") == 0
        assert metric(samples, "sglang:num_bootstrap_failed_reqs_total") == 0
    assert metric(decode, "sglang:num_running_reqs") == 0
    for log in (stack.prefill_proc.log(), stack.decode_proc.log()):
        assert "NIXL KVManager initialized with backend: LIBFABRIC" in log
        assert "Created 16 rails using provider=efa" in log


def test_a_decode_told_the_wrong_prefill_pp_fails_the_request(engine_launcher):
    stack = sglang_stack(engine_launcher, prefill_pp=2, decode_expects_pp=1)
    [result] = run(stack.router + "/v1/completions", [completion(make_prompt(100), 2)])
    assert result.status == 500
    assert "prefill_pp" in result.error["message"]


def test_nixl_without_libfabric_silently_falls_back_to_tcp(engine_launcher):
    port = engine_launcher.port()
    engine = engine_launcher.start(
        ["python3", "-m", "sglang.launch_server", "--model-path", "m", "--port", str(port), "--enable-metrics",
         "--disaggregation-mode", "decode", "--disaggregation-transfer-backend", "nixl"],
        "decode", engine_launcher.env(FI_PROVIDER="efa"))
    engine.wait_http(f"http://127.0.0.1:{port}/health")
    assert "Backend UCX was instantiated" in engine.log()
    assert "provider=efa" not in engine.log()  # UCX names no libfabric provider: no proof of EFA
    assert "ERROR" not in engine.log()
