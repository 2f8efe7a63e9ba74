"""The canary's evidence: Prometheus samples read right, and a verdict that fails every way the KV
path can be wrong (fell back, never moved, recomputed, no counter, slow)."""

from __future__ import annotations

import httpx
import pytest

from tasks.adapters.engine_http import EngineHttp
from tasks.parsing.prometheus import Sample, parse_prometheus
from tasks.errors import StackNotReady
from tasks.planning.canary import canary_prompt, canary_tokens, judge, transport_in_log

KV = "pdlift_sandbox_kv_transfer_bytes_total"


def _kv(direction: str, **by_protocol: float) -> list[Sample]:
    return [Sample(KV, {"direction": direction, "protocol": p}, v) for p, v in by_protocol.items()]


def _judge(prefill_after, decode_after, ttft=0.2, decode_extra=(), bound=5.0):
    before = {"prefill": _kv("sent", efa=100.0, tcp=0.0), "decode": _kv("received", efa=100.0, tcp=0.0)}
    after = {"prefill": prefill_after, "decode": decode_after + list(decode_extra)}
    return judge(16384, ttft, bound, "efa", before, after)


def test_the_prometheus_text_format_is_read_with_labels_escapes_and_timestamps():
    text = ('# HELP x_total Things.\n# TYPE x_total counter\n'
            'x_total{direction="sent",protocol="efa",note="a \\"quoted\\" \\\\ word"} 1.5e3 1700000000000\n'
            'vllm:num_requests_running{engine="0",model_name="m"} 2.0\nplain 7\nnot a sample\n')
    assert parse_prometheus(text) == [
        Sample("x_total", {"direction": "sent", "protocol": "efa", "note": 'a "quoted" \\ word'}, 1500.0),
        Sample("vllm:num_requests_running", {"engine": "0", "model_name": "m"}, 2.0),
        Sample("plain", {}, 7.0)]


def test_kv_bytes_moved_over_efa_on_both_sides_pass():
    report = _judge(_kv("sent", efa=900.0, tcp=0.0), _kv("received", efa=900.0, tcp=0.0))
    assert report.ok, report.problems
    assert report.prefill_sent == {"efa": 800.0, "tcp": 0.0} and report.decode_received["efa"] == 800.0


def test_kv_bytes_that_moved_over_tcp_fail_as_a_fallback():
    report = _judge(_kv("sent", efa=100.0, tcp=500.0), _kv("received", efa=100.0, tcp=500.0))
    assert not report.ok
    assert "the prefill engine sent 500 B over tcp, none over efa" in report.problems
    assert any("fell back from efa" in p for p in report.problems)


def test_no_kv_moved_fails_even_without_a_fallback():
    report = _judge(_kv("sent", efa=100.0), _kv("received", efa=100.0))
    assert report.problems == ("the prefill engine sent no KV bytes during the canary",
                               "the decode engine received no KV bytes during the canary")


def test_a_recomputed_prefill_fails():
    recomputed = [Sample("pdlift_sandbox_kv_recomputed_prefills_total", {}, 1.0)]
    report = _judge(_kv("sent", efa=900.0), _kv("received", efa=900.0), decode_extra=recomputed)
    assert report.problems == ("the decode engine recomputed 1 prefill(s) instead of loading the KV",)


def test_an_engine_without_a_kv_counter_cannot_prove_the_path():
    report = _judge([Sample("vllm:num_requests_running", {}, 0.0)], _kv("received", efa=900.0))
    assert any("exports no *kv_transfer_bytes_total counter" in p for p in report.problems)


def test_a_ttft_above_the_sanity_bound_fails():
    report = _judge(_kv("sent", efa=900.0), _kv("received", efa=900.0), ttft=6.0, bound=5.0)
    assert report.problems == ("TTFT 6000 ms is above the sanity bound of 5000 ms",)


# A stock vLLM image with NIXL: no exporter; vLLM's own metrics on the engine that reads the KV.
LIBFABRIC_LOG = "INFO 11-29 10:00:01 [nixl_connector.py:412] Backend LIBFABRIC was instantiated\n"
UCX_LOG = "INFO 11-29 10:00:01 [nixl_connector.py:412] Backend UCX was instantiated\n"


def _native(nbytes: float, failed: float = 0.0, queried: float = 16384.0, hits: float = 16384.0) -> list[Sample]:
    return [Sample("vllm:nixl_bytes_transferred_sum", {"engine": "0"}, nbytes),
            Sample("vllm:nixl_bytes_transferred_count", {"engine": "0"}, 1.0 if nbytes else 0.0),
            Sample("vllm:nixl_num_failed_transfers_total", {"engine": "0"}, failed),
            Sample("vllm:external_prefix_cache_queries_total", {"engine": "0"}, queried),
            Sample("vllm:external_prefix_cache_hits_total", {"engine": "0"}, hits)]


def _judge_native(decode_after, logs=(LIBFABRIC_LOG, LIBFABRIC_LOG), ttft=0.2):
    before = {"prefill": [], "decode": _native(0.0, queried=0.0, hits=0.0)}
    after = {"prefill": [Sample("vllm:num_requests_running", {}, 0.0)], "decode": decode_after}
    transports = {"prefill": transport_in_log(logs[0]), "decode": transport_in_log(logs[1])}
    return judge(16384, ttft, 5.0, "efa", before, after, transports)


def test_the_transport_is_read_from_the_start_up_log():
    assert transport_in_log("x\n" + LIBFABRIC_LOG) == "efa"
    assert transport_in_log("... using EFA device (libfabric) for KV ...") == "efa"
    assert transport_in_log(LIBFABRIC_LOG + "libfabric: selected provider: tcp\n") == "tcp"
    assert transport_in_log(LIBFABRIC_LOG + "NET/OFI Selected provider is sockets\n") == "sockets"
    assert transport_in_log(LIBFABRIC_LOG + "NIXL LIBFABRIC: provider efa, 16 domains\n") == "efa"
    assert transport_in_log(UCX_LOG) == "tcp"
    assert transport_in_log("INFO Application startup complete\n") is None


def test_stock_vllm_nixl_metrics_and_a_libfabric_log_prove_the_path():
    report = _judge_native(_native(6.6e6))
    assert report.ok, report.problems
    assert report.evidence == "vllm-nixl" and report.decode_received == {"efa": 6.6e6}
    assert "decode received 6.6 MB over efa" in report.summary()


def test_stock_vllm_on_ucx_fails_as_a_fallback():
    report = _judge_native(_native(6.6e6), logs=(UCX_LOG, UCX_LOG))
    assert "the engines moved 6.6 MB of KV over tcp, none over efa" in report.problems
    assert any("fell back from efa" in p for p in report.problems)


def test_stock_vllm_without_a_transport_line_cannot_prove_efa():
    report = _judge_native(_native(6.6e6), logs=("", ""))
    assert len(report.problems) == 1 and "no engine log names the KV transport" in report.problems[0]


def test_stock_vllm_failed_transfers_nothing_moved_or_a_recompute_fail():
    assert _judge_native(_native(6.6e6, failed=2.0)).problems == (
        "the engines counted 2 failed NIXL transfer(s) during the canary",)
    assert _judge_native(_native(0.0)).problems == (
        "no KV bytes moved during the canary (vllm:nixl_bytes_transferred)",)
    assert _judge_native(_native(6.6e6, hits=0.0)).problems == (
        "the decode engine loaded 0 of 16384 prompt tokens from the prefill and recomputed the rest",)


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
