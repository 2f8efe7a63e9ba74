"""The canary's evidence: Prometheus samples read right, and a verdict from stock evidence only
(EFA counters, the engines' own metrics and log lines) that fails every way the KV path can be
wrong, each boundary pinned on both sides."""

from __future__ import annotations

import dataclasses
import math

import httpx
import pytest

from tasks.adapters.engine_http import EngineHttp
from tasks.errors import ParseError, StackNotReady
from tasks.parsing import efa_counters
from tasks.parsing.prometheus import Sample, parse_prometheus
from tasks.planning.canary import (CanarySpec, RoleEvidence, canary_prompt, canary_tokens, judge,
                                   transport_in_log)

N, BLOCK, KV_BYTES = 16384, 64, 16384 * 54912.0
VLLM = CanarySpec("vllm", "nixl", "efa", N, KV_BYTES, BLOCK, ttft_bound_s=5.0)
NIXL_EFA = "I1202 08:00:01.000000 7 libfabric_rail_manager.cpp:120] Created 16 rails using provider=efa\n"
MOONCAKE_EFA = "I1202 08:00:01.000000 7 transfer_engine_impl.cpp:120] EFA transport installed successfully\n"


def _by_source(loaded: float, computed: float, failed: float = 0.0) -> list[Sample]:
    return [Sample("vllm:prompt_tokens_by_source_total", {"engine": "0", "source": "external_kv_transfer"}, loaded),
            Sample("vllm:prompt_tokens_by_source_total", {"engine": "0", "source": "local_compute"}, computed),
            Sample("vllm:nixl_num_failed_transfers_total", {"engine": "0"}, failed)]


def _vllm(loaded=N - 1.0, computed=1.0, failed=0.0, fabric=KV_BYTES, logs=(NIXL_EFA, NIXL_EFA), spec=VLLM,
          ttft=0.2, error=""):
    base = 1000.0  # the counters never start at zero on a live engine
    evidence = {
        "prefill": RoleEvidence(_by_source(0, base), _by_source(0, base + N), logs[0], 5000, 5000 + int(fabric)),
        "decode": RoleEvidence(_by_source(base, base), _by_source(base + loaded, base + computed, failed), logs[1],
                               7000, 7000 + int(fabric))}
    return judge(spec, ttft, evidence, error)


def test_a_kv_load_over_efa_passes_and_reads_as_such():
    report = _vllm()
    assert report.ok, report.problems
    assert report.loaded_tokens == N - 1 and report.computed_tokens == 1
    assert "prefill nodes' EFA counters +899.7 MB" in report.summary() and "decode log: efa" in report.summary()


def test_the_fabric_counters_must_grow_by_at_least_nine_tenths_of_the_canary_kv():
    need = math.ceil(0.9 * KV_BYTES)
    assert _vllm(fabric=need).ok
    short = _vllm(fabric=need - 1).problems
    assert len(short) == 2 and all("below 90% of its 899.7 MB of KV: the KV did not go over EFA" in p for p in short)
    assert "the prefill nodes' EFA devices counted 809.7 MB" in short[0]


def test_unreadable_fabric_counters_cannot_prove_the_path():
    report = _vllm()
    evidence = {"prefill": RoleEvidence([], [], NIXL_EFA, None, None, "node x is not one of this run's fleet"),
                "decode": RoleEvidence(_by_source(0, 0), _by_source(N - 1, 1), NIXL_EFA, 0, int(KV_BYTES))}
    report = judge(VLLM, 0.2, evidence)
    assert report.problems == ("the EFA counters of the prefill nodes could not be read (node x is not one of this "
                               "run's fleet): the KV path cannot be proven",)


def test_decode_may_compute_one_block_of_the_prompt_not_more():
    assert _vllm(loaded=N - BLOCK, computed=BLOCK).ok
    (problem,) = _vllm(loaded=N - BLOCK - 1, computed=BLOCK + 1).problems
    assert "computed 65 of 16384 prompt tokens itself (more than one block of 64)" in problem
    assert "recomputed the prefill instead of loading the KV" in problem


def test_prompt_tokens_decode_found_in_its_own_cache_are_not_a_transfer():
    """A unique prompt cannot hit decode's prefix cache: if more than a block did, the KV is unproven."""
    def with_cache_hit(hit: float):
        evidence = {"prefill": RoleEvidence([], [], NIXL_EFA, 0, int(KV_BYTES)),
                    "decode": RoleEvidence(_by_source(0, 0), _by_source(N - 1 - hit, 1) + [
                        Sample("vllm:prompt_tokens_by_source_total", {"source": "local_cache_hit"}, hit)],
                        NIXL_EFA, 0, int(KV_BYTES))}
        return judge(VLLM, 0.2, evidence)
    assert with_cache_hit(BLOCK - 1).ok  # loaded = N-1-63 = prompt - 64: exactly one block short
    assert with_cache_hit(BLOCK).problems == (
        "the decode engine loaded only 16319 of 16384 prompt tokens over the connector",)


def test_a_failed_transfer_counted_by_the_engine_fails_the_canary():
    (problem,) = _vllm(failed=1.0).problems
    assert problem == ("the decode engine counted 1 failed KV transfer(s) (vllm:nixl_num_failed_transfers) during "
                       "the canary")


def test_a_failed_canary_request_is_reported_with_the_counters():
    problems = _vllm(loaded=0, computed=0, failed=1.0, error="POST http://r/v1/completions: 500: KV load failed",
                     ttft=0.0).problems
    assert problems[0] == "the canary request failed: POST http://r/v1/completions: 500: KV load failed"
    assert any("counted 1 failed KV transfer(s)" in p for p in problems)


def test_a_vllm_without_the_by_source_counter_cannot_tell_a_load_from_a_recompute():
    evidence = {r: RoleEvidence([], [], NIXL_EFA, 0, int(KV_BYTES)) for r in ("prefill", "decode")}
    (problem,) = judge(VLLM, 0.2, evidence).problems
    assert "exports no vllm:prompt_tokens_by_source_total" in problem


def test_the_ttft_bound_is_inclusive():
    assert _vllm(ttft=5.0).ok
    assert _vllm(ttft=5.001).problems == ("TTFT 5001 ms is above the sanity bound of 5000 ms",)


def test_the_logs_must_name_efa_for_nixl_and_a_tcp_provider_is_a_fallback():
    assert transport_in_log("nixl", NIXL_EFA) == ("efa", "")
    transport, problem = transport_in_log("nixl", NIXL_EFA.replace("provider=efa", "provider=tcp"))
    assert transport == "tcp" and "TCP fallback" in problem and "FI_PROVIDER=efa" in problem
    assert transport_in_log("nixl", "I1202 x.cpp:1] Discovered 1 tcp devices (TCP fallback)\n")[0] == "tcp"
    transport, problem = transport_in_log("nixl", "INFO Backend LIBFABRIC was instantiated\n")
    assert transport == "" and "NIXL_LOG_LEVEL=INFO" in problem  # instantiated is not proof of EFA
    problems = _vllm(logs=(NIXL_EFA, "INFO Backend UCX was instantiated\n")).problems
    assert problems == ("decode: " + transport_in_log("nixl", "")[1],)


@pytest.mark.parametrize("line", ["TcpTransport: listen on port 15428", "Installing TCP transport (auto_discover "
                                  "disabled in EFA build)", "MC_FORCE_TCP is set, using TCP transport only"])
def test_mooncake_on_tcp_names_the_efa_build_of_the_transfer_engine(line):
    transport, problem = transport_in_log("mooncake", MOONCAKE_EFA + line + "\n")
    assert transport == "tcp" and "mooncake-transfer-engine-efa" in problem


def test_mooncake_must_say_its_efa_transport_is_installed():
    assert transport_in_log("mooncake", MOONCAKE_EFA) == ("efa", "")
    transport, problem = transport_in_log("mooncake", "The Mooncake Transfer Engine is using efa as its protocol.")
    assert transport == "" and "EFA transport installed successfully" in problem  # the request is not the proof


def _sglang(prefill_stage=1.0, decode_stage=1.0, failed=0.0, metrics=True):
    def samples(stage: str, count: float, fails: float) -> list[Sample]:
        if not metrics:
            return []
        labels = {"engine_type": "x", "tp_rank": "0"}
        return [Sample("sglang:per_stage_req_latency_seconds_count", {**labels, "stage": stage}, 10 + count),
                Sample("sglang:num_transfer_failed_reqs_total", labels, fails),
                Sample("sglang:num_bootstrap_failed_reqs_total", labels, 0.0)]
    evidence = {"prefill": RoleEvidence(samples("prefill_transfer_kv_cache", 0, 0),
                                        samples("prefill_transfer_kv_cache", prefill_stage, 0), MOONCAKE_EFA,
                                        0, int(KV_BYTES)),
                "decode": RoleEvidence(samples("decode_transferred", 0, 0),
                                       samples("decode_transferred", decode_stage, failed), MOONCAKE_EFA,
                                       0, int(KV_BYTES))}
    return judge(CanarySpec("sglang", "mooncake", "efa", N, KV_BYTES, BLOCK, 5.0), 0.2, evidence)


def test_sglang_counts_one_transfer_stage_on_each_side_and_no_failure():
    assert _sglang().ok
    assert _sglang(decode_stage=0.0).problems == (
        "the decode engine counted no decode_transferred stage during the canary: no KV was transferred",)
    assert _sglang(prefill_stage=0.0).problems == (
        "the prefill engine counted no prefill_transfer_kv_cache stage during the canary: no KV was transferred",)
    assert _sglang(failed=1.0).problems == (
        "the decode engine counted 1 failed request(s) (sglang:num_transfer_failed_reqs_total) during the canary",)
    assert all("--enable-metrics" in p for p in _sglang(metrics=False).problems)


def test_over_tcp_by_choice_neither_the_fabric_nor_the_logs_are_asked():
    report = _vllm(fabric=0, logs=("", ""), spec=dataclasses.replace(VLLM, protocol="tcp"))
    assert report.ok, report.problems
    assert "no EFA counters judged (protocol tcp)" in report.summary() and "EFA counters not read" not in report.summary()


def test_efa_counters_are_summed_over_devices_and_a_bad_line_is_named():
    text = ("/sys/class/infiniband/rdmap79s0/ports/1/hw_counters/rdma_read_bytes 100\n"
            "/sys/class/infiniband/rdmap80s0/ports/1/hw_counters/rdma_read_bytes 50\n"
            "/sys/class/infiniband/rdmap80s0/ports/1/hw_counters/tx_bytes 7\n")
    counters = efa_counters.parse(text)
    assert counters.devices == ("rdmap79s0", "rdmap80s0") and counters.totals["rdma_read_bytes"] == 150
    assert counters.bytes_moved == 157 and counters.totals["rdma_write_bytes"] == 0  # absent on this device
    assert efa_counters.parse("").devices == ()
    with pytest.raises(ParseError, match="EFA counters of node-a, line 2: 'garbage here'"):
        efa_counters.parse(text.splitlines()[0] + "\ngarbage here\n", "node-a")


def test_the_prometheus_text_format_is_read_with_labels_escapes_and_timestamps():
    text = ('# HELP x_total Things.\n# TYPE x_total counter\n'
            'x_total{direction="sent",protocol="efa",note="a \\"quoted\\" \\\\ word"} 1.5e3 1700000000000\n'
            'vllm:num_requests_running{engine="0",model_name="m"} 2.0\nplain 7\nnot a sample\n')
    assert parse_prometheus(text) == [
        Sample("x_total", {"direction": "sent", "protocol": "efa", "note": 'a "quoted" \\ word'}, 1500.0),
        Sample("vllm:num_requests_running", {"engine": "0", "model_name": "m"}, 2.0),
        Sample("plain", {}, 7.0)]


def test_the_canary_prompt_is_as_long_as_asked_and_never_repeats():
    assert len(canary_prompt(1000).split()) == 1000
    assert canary_prompt(50) != canary_prompt(50)
    assert canary_tokens(202752) == 16384 and canary_tokens(8192) == 4096


def _stream(events: list[str], status: int = 200):
    def handler(request: httpx.Request) -> httpx.Response:
        body = "".join(f"data: {e}\n\n" for e in events)
        return httpx.Response(status, text=body, headers={"content-type": "text/event-stream"})
    return EngineHttp(transport=httpx.MockTransport(handler))


def test_a_streamed_completion_reports_its_chunks_and_text():
    http = _stream(['{"choices":[{"text":" a"}]}', '{"choices":[{"text":" b"}]}', "[DONE]"])
    done = http.stream_completion("http://router/v1/completions", "m", "p", 2, timeout_s=5)
    assert done.chunks == 2 and done.text == " a b" and 0 <= done.ttft_s <= done.e2e_s


def test_an_error_in_the_stream_or_an_error_status_is_stack_not_ready():
    with pytest.raises(StackNotReady, match="KV cache compatibility"):
        _stream(['{"choices":[{"text":" a"}]}', '{"error":"KV cache compatibility check failed"}']) \
            .stream_completion("http://router/v1/completions", "m", "p", 2, timeout_s=5)
    with pytest.raises(StackNotReady, match="500"):
        _stream([], status=500).stream_completion("http://router/v1/completions", "m", "p", 2, timeout_s=5)
