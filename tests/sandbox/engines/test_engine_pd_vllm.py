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

MODEL = LatencyModel()  # the stacks run with the default latency settings


@pytest.fixture(scope="module")
def stack(module_engine_launcher):
    return vllm_stack(module_engine_launcher)


def kv_bytes(base: str, direction: str, protocol: str) -> float:
    return metric(metrics(base), "pdlift_sandbox_kv_transfer_bytes_total", direction=direction, protocol=protocol)


def test_a_streamed_completion_through_the_router_returns_n_tokens_with_usage(stack):
    [result] = run(stack.router + "/v1/completions", [completion(make_prompt(300), 12)])
    assert result.status == 200 and result.error is None and result.done
    assert len(result.texts) == 12
    assert result.usage == {"prompt_tokens": 300, "completion_tokens": 12, "total_tokens": 312,
                            "prompt_tokens_details": None}


def test_kv_bytes_move_from_prefill_to_decode_over_efa_and_are_not_recomputed(stack):
    sent, received = kv_bytes(stack.prefill, "sent", "efa"), kv_bytes(stack.decode, "received", "efa")
    [result] = run(stack.router + "/v1/completions", [completion(make_prompt(2000), 4)])
    assert result.status == 200
    expected = MODEL.kv_bytes(2000, "fp8")
    assert kv_bytes(stack.prefill, "sent", "efa") - sent == expected
    assert kv_bytes(stack.decode, "received", "efa") - received == expected
    decode = metrics(stack.decode)
    assert metric(decode, "pdlift_sandbox_kv_transfer_bytes_total", protocol="tcp") == 0
    assert metric(decode, "pdlift_sandbox_kv_protocol_info", protocol="efa") == 1
    assert metric(decode, "vllm:external_prefix_cache_hits_total") >= 2000
    assert "Mooncake transfer engine protocol: efa" in stack.prefill_proc.log()


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
