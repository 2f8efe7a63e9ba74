"""The product's server-side figures read from the engine stand-ins' own metric names and formats.

The benchmark reads queue time, KV transfer time and size, and speculative-decoding acceptance
from what vLLM and SGLang export (tasks/planning/server_figures.py). Here a PD stack of each runs
a few requests between two readings, and the figures must be what the latency model did.
"""

from __future__ import annotations

import json

import pytest

from sandbox.engines.latency import LatencyModel
from sandbox.engines.stacks import sglang_stack, vllm_stack
from sandbox.engines.tokenizer import make_prompt
from tasks.adapters.engine_http import EngineHttp
from tasks.planning.server_figures import Snapshot, figures

from .client import completion, run

MODEL = LatencyModel()
PROMPT, OUT, REQUESTS = 2000, 9, 4


def read(http: EngineHttp, stack) -> Snapshot:
    return Snapshot({"prefill": tuple(http.metrics(stack.prefill + "/metrics")),
                     "decode": tuple(http.metrics(stack.decode + "/metrics"))})


def measure(stack) -> tuple:
    with EngineHttp() as http:
        before = read(http, stack)
        results = run(stack.router + "/v1/completions",
                      [completion(make_prompt(PROMPT, seed=i), OUT) for i in range(REQUESTS)])
        assert all(r.status == 200 for r in results)
        during = read(http, stack)   # the gauges still hold the last transfer
        return before, [during], read(http, stack)


def test_vllm_nixl_transfer_time_bytes_and_mtp_acceptance(module_engine_launcher):
    spec = json.dumps({"method": "mtp", "num_speculative_tokens": 2})
    stack = vllm_stack(module_engine_launcher, connector="NixlConnector", decode_flags=("--speculative-config", spec))
    figs = figures("vllm", "nixl", [], *measure(stack))
    nbytes = MODEL.kv_bytes(PROMPT, "fp8")
    assert figs.values["kv_transfer_ms_mean"][1] == REQUESTS            # one pull per request, on decode
    assert figs.value("kv_transfer_ms_mean") == pytest.approx(1000 * MODEL.transfer_s(nbytes, "efa"), rel=1e-6)
    assert figs.value("kv_transfer_mib_mean") == pytest.approx(nbytes / 2**20, rel=1e-6)
    assert figs.value("spec_acceptance") == pytest.approx(MODEL.spec_acceptance, abs=0.05)
    assert figs.values["prefill_queue_ms_mean"][1] == REQUESTS and figs.values["decode_queue_ms_mean"][1] == REQUESTS
    assert 0 <= figs.value("prefill_queue_ms_mean") < 50                # four requests, 256 slots: no waiting


def test_sglang_transfer_stage_and_gauges_and_no_acceptance_without_speculative_decoding(module_engine_launcher):
    stack = sglang_stack(module_engine_launcher)
    figs = figures("sglang", "nixl", [], *measure(stack))
    nbytes = MODEL.kv_bytes(PROMPT, "fp8_e4m3")
    assert figs.values["kv_transfer_ms_mean"][1] == REQUESTS            # counted by the prefill side
    assert figs.value("kv_transfer_ms_mean") == pytest.approx(1000 * MODEL.transfer_s(nbytes, "efa"), rel=1e-6)
    assert figs.value("kv_transfer_mib_mean") == pytest.approx(nbytes / 2**20, rel=1e-6)
    assert figs.values["prefill_queue_ms_mean"][1] == REQUESTS          # sglang:queue_time_seconds
    assert figs.value("spec_acceptance") is None
    assert any("sglang:spec_accept_rate" in n for n in figs.notes)
