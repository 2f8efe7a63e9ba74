"""A vLLM prefill + decode + vllm-router stack (Mooncake over EFA): API, KV path, latency model."""

from __future__ import annotations

import json
import statistics

import pytest

from sandbox.engines.latency import LatencyModel
from sandbox.engines.tokenizer import make_prompt

from tests.timing import timing
from .client import best_ttft, completion, fetch, get_json, metric, metrics, run
from sandbox.engines.stacks import vllm_stack
from sandbox.nodes import efa_counters

MODEL = LatencyModel()  # the stacks run with the default latency settings


@pytest.fixture(scope="module")
def stack(module_engine_launcher):
    return vllm_stack(module_engine_launcher)


def efa(node) -> dict[str, int]:
    return efa_counters.read(node)


def test_a_streamed_completion_through_the_router_returns_n_tokens_with_usage(stack):
    [result] = run(stack.router + "/v1/completions", [completion(make_prompt(300), 12)])
    assert result.status == 200 and result.error is None and result.done
    assert len(result.texts) == 12
    assert result.usage == {"prompt_tokens": 300, "completion_tokens": 12, "total_tokens": 312,
                            "prompt_tokens_details": None}


def test_mooncake_writes_the_kv_over_the_nodes_efa_devices_and_decode_loads_it(stack):
    """Mooncake pushes: rdma_write_bytes on the prefill's node, rdma_write_recv_bytes on the
    decode's; decode counts the prompt as loaded over the connector, all but the last token."""
    p0, d0 = efa(stack.prefill_node), efa(stack.decode_node)
    by_source = {s: metric(metrics(stack.decode), "vllm:prompt_tokens_by_source_total", source=s)
                 for s in ("local_compute", "external_kv_transfer")}
    [result] = run(stack.router + "/v1/completions", [completion(make_prompt(2000), 4)])
    assert result.status == 200
    expected = MODEL.kv_bytes(2000, "fp8")
    p1, d1 = efa(stack.prefill_node), efa(stack.decode_node)
    assert p1["rdma_write_bytes"] - p0["rdma_write_bytes"] == expected
    assert d1["rdma_write_recv_bytes"] - d0["rdma_write_recv_bytes"] == expected
    assert p1["rdma_read_bytes"] == p0["rdma_read_bytes"] and d1["rdma_read_bytes"] == d0["rdma_read_bytes"]
    decode = metrics(stack.decode)
    assert metric(decode, "vllm:prompt_tokens_by_source_total", source="external_kv_transfer") \
        - by_source["external_kv_transfer"] == 1999
    assert metric(decode, "vllm:prompt_tokens_by_source_total", source="local_compute") \
        - by_source["local_compute"] == 1
    assert not any(name.startswith("vllm:mooncake") for name, _ in decode)  # stock vLLM: no such metrics
    log = stack.prefill_proc.log()
    assert "The Mooncake Transfer Engine is using efa as its protocol." in log
    assert "EFA transport installed successfully" in log and "TcpTransport" not in log


@timing
def test_ttft_at_concurrency_1_matches_the_latency_model_for_3k_and_60k_prompts(stack):
    for n, repeats in ((3000, 5), (60000, 2)):
        ttft = best_ttft(stack.router + "/v1/completions", [make_prompt(n, seed=i) for i in range(repeats)])
        expected = MODEL.ttft_s(n, pd=True, protocol="efa", kv_cache_dtype="fp8")
        assert ttft == pytest.approx(expected, rel=0.05), (n, ttft, expected)


@timing
def test_a_120k_token_prompt_streams_correctly(stack):
    [result] = run(stack.router + "/v1/completions", [completion(make_prompt(120_000), 8)])
    assert result.status == 200 and result.done and len(result.texts) == 8
    assert result.usage["prompt_tokens"] == 120_000
    assert result.ttft == pytest.approx(MODEL.ttft_s(120_000, pd=True, kv_cache_dtype="fp8"), rel=0.05)


@timing
def test_tpot_grows_with_the_number_of_sequences_decoding_at_once(stack):
    n, out = 500, 30
    results = run(stack.router + "/v1/completions", [completion(make_prompt(n, seed=i), out) for i in range(8)])
    assert all(r.status == 200 and len(r.texts) == out for r in results)
    tpot = statistics.mean(r.tpot for r in results)
    assert tpot == pytest.approx(MODEL.step_s(8, n), rel=0.05)
    assert tpot > 1.15 * MODEL.step_s(1, n)


def test_chat_completions_stream_a_role_chunk_then_content_and_usage(stack):
    body = {"model": "m", "messages": [{"role": "user", "content": make_prompt(100)}], "max_tokens": 5,
            "stream": True, "ignore_eos": True, "stream_options": {"include_usage": True}}
    [result] = run(stack.router + "/v1/chat/completions", [body])
    assert result.status == 200 and len(result.texts) == 5
    assert result.usage["prompt_tokens"] == 100 + 3 + 3  # content + per-message + reply template tokens


def test_a_non_streamed_completion_returns_the_text_and_usage_at_once(stack):
    [result] = run(stack.router + "/v1/completions", [completion(make_prompt(50), 6, stream=False)])
    assert result.status == 200
    assert len(result.body["choices"][0]["text"].split()) == 6
    assert result.body["usage"]["completion_tokens"] == 6


def test_without_ignore_eos_a_reply_may_stop_early_like_a_real_model(stack):
    [result] = run(stack.router + "/v1/completions", [completion(make_prompt(50), 500, stream=False,
                                                                 ignore_eos=False)])
    assert result.body["choices"][0]["finish_reason"] == "stop"
    assert result.body["usage"]["completion_tokens"] < 500


def test_tokenize_counts_one_token_per_word_and_models_lists_the_served_name(stack):
    status, body = fetch(stack.decode + "/tokenize", json.dumps({"model": "m", "prompt": make_prompt(1234)}).encode())
    answer = json.loads(body)
    assert status == 200
    assert answer["count"] == 1234 and len(answer["tokens"]) == 1234
    assert [m["id"] for m in get_json(stack.router + "/v1/models")["data"]] == ["m"]


def test_a_prompt_beyond_the_context_length_is_rejected_with_400(stack):
    [result] = run(stack.decode + "/v1/completions", [completion([1] * 202_752, 8)])
    assert result.status == 400
    assert "maximum context length is 202752 tokens" in result.error["message"]


def test_the_router_lists_its_workers_with_their_health(stack):
    workers = get_json(stack.router + "/workers")["workers"]
    assert {(w["worker_type"], w["is_healthy"]) for w in workers} == {("prefill", True), ("decode", True)}
