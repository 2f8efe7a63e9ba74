"""Injected engine faults: TCP fallback of the KV path, P/D mismatch, restarts, errors, slow start."""

from __future__ import annotations

import asyncio
import json
import time
from types import SimpleNamespace

import pytest

from sandbox.engines.latency import LatencyModel
from sandbox.engines.tokenizer import make_prompt

from tests.timing import timing
from .client import best_ttft, completion, fetch, metric, metrics, run
from sandbox.engines.stacks import vllm_stack
from sandbox.nodes import efa_counters

MODEL = LatencyModel()


@timing
def test_with_the_tcp_fallback_fault_the_kv_path_says_tcp_and_ttft_pays_100x_the_transfer(engine_launcher):
    stack = vllm_stack(engine_launcher, prefill_env={"PDLIFT_SANDBOX_FAULTS": json.dumps({"tcp_fallback": True})})
    n = 3000
    ttft = best_ttft(stack.router + "/v1/completions", [make_prompt(n, seed=i) for i in range(3)])
    transfer_efa = MODEL.transfer_s(MODEL.kv_bytes(n, "fp8"), "efa")
    expected = MODEL.prefill_s(n) + 100 * transfer_efa
    assert ttft == pytest.approx(expected, rel=0.05)
    assert ttft - MODEL.ttft_s(n, pd=True, kv_cache_dtype="fp8") == pytest.approx(99 * transfer_efa, rel=0.1)
    assert efa_counters.read(stack.prefill_node) == efa_counters.read(stack.decode_node) == \
        dict.fromkeys(efa_counters.COUNTERS, 0)  # TCP goes through the ENA interface
    log = stack.prefill_proc.log()
    assert "Topology discovery complete. Found 0 HCAs." in log and "TcpTransport: listen on port" in log
    assert "EFA transport installed successfully" not in log


def test_nixl_libfabric_pinned_to_efa_without_efa_fails_to_start(engine_launcher):
    """FI_PROVIDER=efa turns NIXL's silent tcp fallback into a start-up failure (kv-path-proof.md)."""
    port = engine_launcher.port()
    kv = json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_consumer",
                     "kv_connector_extra_config": {"backends": ["LIBFABRIC"]}})
    env = engine_launcher.env(FI_PROVIDER="efa", PDLIFT_SANDBOX_FAULTS=json.dumps({"tcp_fallback": True}))
    engine = engine_launcher.start(["vllm", "serve", "m", "--port", str(port), "--kv-transfer-config", kv],
                                   "decode", env)
    assert engine.wait_exit(timeout=10) == 1
    assert "no fabric found for provider efa" in engine.log()


def test_a_kv_cache_dtype_mismatch_fails_the_request_at_the_first_transfer(engine_launcher):
    stack = vllm_stack(engine_launcher, decode_flags=("--kv-cache-dtype", "auto"))  # argparse: the last one wins
    [result] = run(stack.router + "/v1/completions", [completion(make_prompt(100), 4)])
    assert result.status == 500
    assert "compatibility check failed" in result.error["message"]
    assert "kv_cache_dtype" in result.error["message"]
    assert "KV compatibility check failed" in stack.prefill_proc.log()


def test_with_the_recompute_policy_a_failed_kv_load_is_recomputed_on_decode_instead(engine_launcher):
    stack = vllm_stack(engine_launcher, decode_flags=("--kv-cache-dtype", "auto"),
                       decode_kv={"kv_load_failure_policy": "recompute"})
    [result] = run(stack.router + "/v1/completions", [completion(make_prompt(100), 4)])
    assert result.status == 200 and len(result.texts) == 4
    _decode_computed_the_prompt_itself(stack, 100)


def test_the_recompute_fault_computes_the_prompt_on_decode_and_moves_no_kv(engine_launcher):
    stack = vllm_stack(engine_launcher, decode_env={"PDLIFT_SANDBOX_FAULTS": json.dumps({"recompute": True})})
    [result] = run(stack.router + "/v1/completions", [completion(make_prompt(500), 4)])
    assert result.status == 200 and len(result.texts) == 4
    _decode_computed_the_prompt_itself(stack, 500)


def test_the_failed_transfer_fault_counts_a_nixl_failure_and_fails_the_request(engine_launcher):
    stack = vllm_stack(engine_launcher, connector="NixlConnector",
                       decode_env={"PDLIFT_SANDBOX_FAULTS": json.dumps({"kv_transfer_fail": True})})
    [result] = run(stack.router + "/v1/completions", [completion(make_prompt(300), 4)])
    assert result.status == 500  # kv_load_failure_policy "fail" (the stacks' default is the product's)
    assert metric(metrics(stack.decode), "vllm:nixl_num_failed_transfers_total") == 1


def test_the_prefill_restart_fault_exits_the_engine_after_n_requests(engine_launcher):
    port = engine_launcher.port()
    kv = json.dumps({"kv_connector": "MooncakeConnector", "kv_role": "kv_producer"})
    env = engine_launcher.env(PDLIFT_SANDBOX_FAULTS=json.dumps({"exit_after_requests": 2}),
                              VLLM_MOONCAKE_BOOTSTRAP_PORT=str(engine_launcher.port()))
    engine = engine_launcher.start(["vllm", "serve", "m", "--port", str(port), "--kv-transfer-config", kv],
                                   "prefill", env)
    engine.wait_http(f"http://127.0.0.1:{port}/health")
    results = run(f"http://127.0.0.1:{port}/v1/completions", [completion("a b c", 2, stream=False)] * 2)
    assert [r.status for r in results] == [200, 200]
    assert engine.wait_exit(timeout=10) == 1
    assert "EngineCore died unexpectedly after 2 requests" in engine.log()


def test_an_error_rate_set_live_in_the_state_dir_fails_exactly_that_fraction(engine_launcher):
    port = engine_launcher.port()
    engine = engine_launcher.start(["vllm", "serve", "m", "--port", str(port)], "engine")
    engine.wait_http(f"http://127.0.0.1:{port}/health")
    url = f"http://127.0.0.1:{port}/v1/completions"
    assert all(r.status == 200 for r in run(url, [completion("a b", 1)] * 4))
    rules = {"rules": [{"match": {"engine": "vllm", "port": str(port)}, "faults": {"error_rate": 0.25}}]}
    (engine_launcher.state_dir / "sandbox").mkdir(exist_ok=True)
    (engine_launcher.state_dir / "sandbox" / "engines.json").write_text(json.dumps(rules))
    results = run(url, [completion("a b", 1)] * 20)
    assert sum(r.status == 500 for r in results) == 5
    rules["rules"][0]["faults"] = {"error_rate": 0.5, "error_mode": "stream"}
    (engine_launcher.state_dir / "sandbox" / "engines.json").write_text(json.dumps(rules))
    results = run(url, [completion("a b", 3)] * 10)
    failed = [r for r in results if r.error]
    assert len(failed) == 5 and all(r.status == 200 and len(r.texts) == 1 for r in failed)


def test_the_slow_start_fault_keeps_health_at_503_for_that_long(engine_launcher):
    port = engine_launcher.port()
    engine = engine_launcher.start(["vllm", "serve", "m", "--port", str(port)], "engine",
                                   engine_launcher.env(PDLIFT_SANDBOX_FAULTS=json.dumps({"slow_start_s": 1.5})))
    url = f"http://127.0.0.1:{port}/health"
    started, statuses = time.monotonic(), []
    # 60 s for the engine to start and then answer 200: this test runs in scripts/test's other
    # lane, which gets a tenth of the CPUs while the measured lane wants them, and an engine that
    # starts in a second alone was not listening after 8 s there (CI)
    while time.monotonic() - started < 60 and 200 not in statuses:
        statuses.append(fetch(url)[0])  # 0 until it listens
        time.sleep(0.1)
    assert 503 in statuses and statuses[-1] == 200
    assert time.monotonic() - started >= 1.4
    assert engine.proc.poll() is None


def test_the_slow_start_counts_from_when_the_api_listens_not_from_when_the_process_began():
    # A starved engine once took longer than its slow start to begin listening, and went from no
    # answer straight to 200 (this lane's CI run): the 503s must follow the first answer.
    from sandbox.engines.state import EngineState

    group_ready = asyncio.Event()
    group_ready.set()
    engine = SimpleNamespace(settings=SimpleNamespace(faults=SimpleNamespace(slow_start_s=1.5)),
                             group_ready=group_ready, draining=False, started=time.monotonic() - 100,
                             listening_since=None)
    assert not EngineState.ready(engine)  # the process began long ago, its API is not up yet
    engine.listening_since = time.monotonic() - 1.3
    assert not EngineState.ready(engine)
    engine.listening_since = time.monotonic() - 1.6
    assert EngineState.ready(engine)
    engine.draining = True
    assert not EngineState.ready(engine)


def _decode_computed_the_prompt_itself(stack, prompt_tokens: int) -> None:
    """Decode counted the whole prompt as computed, none as loaded, and no KV reached its node."""
    decode = metrics(stack.decode)
    assert metric(decode, "vllm:prompt_tokens_by_source_total", source="local_compute") == prompt_tokens
    assert metric(decode, "vllm:prompt_tokens_by_source_total", source="external_kv_transfer") == 0
    assert efa_counters.read(stack.decode_node)["rdma_write_recv_bytes"] == 0
