"""An SGLang prefill + decode + sglang_router stack over NIXL (LIBFABRIC): the KV path and its checks."""

from __future__ import annotations

import pytest

from sandbox.engines.latency import LatencyModel
from sandbox.engines.tokenizer import make_prompt

from tests.timing import timing
from .client import best_ttft, completion, metric, metrics, run
from sandbox.engines.stacks import sglang_stack

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


def test_kv_bytes_move_over_efa_with_the_nixl_libfabric_backend(stack):
    before = metric(metrics(stack.decode), "pdlift_sandbox_kv_transfer_bytes_total", direction="received",
                    protocol="efa")
    [result] = run(stack.router + "/v1/completions", [completion(make_prompt(1000), 2)])
    assert result.status == 200
    decode, prefill = metrics(stack.decode), metrics(stack.prefill)
    received = metric(decode, "pdlift_sandbox_kv_transfer_bytes_total", direction="received", protocol="efa")
    assert received - before == MODEL.kv_bytes(1000, "fp8_e4m3")
    assert metric(prefill, "pdlift_sandbox_kv_transfer_bytes_total", direction="sent", protocol="efa") > 0
    assert metric(decode, "sglang:num_running_reqs") == 0
    assert "Backend LIBFABRIC was instantiated" in stack.prefill_proc.log()
    assert "using EFA device (libfabric)" in stack.decode_proc.log()


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
    assert metric(metrics(f"http://127.0.0.1:{port}"), "pdlift_sandbox_kv_protocol_info", protocol="tcp") == 1
    assert "Backend UCX was instantiated" in engine.log()
    assert "ERROR" not in engine.log()
