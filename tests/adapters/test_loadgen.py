"""The load generator against sandbox engines whose latency model says what it should measure.

The engines keep to their modelled times with absolute deadlines, so what the client measures
beyond the model is its own error (plus the OS scheduling both on this shared 2-core machine).
The latency model is set slow enough (TTFT ~1 s, TPOT 20-56 ms) that a few milliseconds of
scheduling jitter stay well inside the 3% the issue allows; the shape is the default's.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
from aiohttp import web

from tests.timing import timing
from blueprints.schema import SloSpec
from sandbox.engines.latency import LatencyModel
from tasks.adapters.loadgen import LoadSpec, run_load
from tasks.planning.metrics import summarize

LATENCY = {"prefill_base_s": 1.0, "tpot_base_s": 0.02}
MODEL = LatencyModel().merged(LATENCY)


def _engine(launcher, name: str, **env: str) -> str:
    port = launcher.port()
    proc = launcher.start(["vllm", "serve", "pdlift/tiny", "--served-model-name", "m", "--port", str(port)],
                          name, launcher.env(**env))
    proc.wait_http(f"http://127.0.0.1:{port}/health")
    return f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def engine(module_engine_launcher) -> str:
    return _engine(module_engine_launcher, "timed", PDLIFT_SANDBOX_LATENCY=json.dumps(LATENCY))


def _measure(url: str, **spec) -> tuple:
    result = run_load(LoadSpec(base_url=url, scenario="s", **spec))
    return result, summarize(result.records, result.duration_s, SloSpec(), result.saturated)


@timing
@pytest.mark.parametrize("concurrency, duration", [(1, 4.0), (64, 3.5)])
def test_measured_ttft_and_tpot_are_within_3_percent_of_the_latency_model(engine, concurrency, duration):
    n = 1000
    result, s = _measure(engine, input_tokens=n, output_tokens=12, concurrency=concurrency, duration_s=duration,
                         max_requests=400, warmup_requests=min(concurrency, 8))
    assert s.failed == 0 and s.completed >= (3 if concurrency == 1 else 120)
    assert result.input_lengths_exact, result.input_note
    assert all(r.prompt_tokens == n and r.completion_tokens == 12 for r in result.records)
    ttft_ms, tpot_ms = MODEL.prefill_s(n) * 1000, MODEL.step_s(concurrency, n) * 1000
    assert s.ttft.mean == pytest.approx(ttft_ms, rel=0.03)
    assert s.tpot.mean == pytest.approx(tpot_ms, rel=0.03)
    assert not result.saturated, result.saturation


def test_prompts_are_unique_so_no_prefix_cache_can_flatter_the_result():
    from tasks.adapters.loadgen_prompts import build_prompts

    async def words(text: str) -> int:
        return len(text.split())

    prompts = asyncio.run(build_prompts(words, 50, 5, salt=7))
    texts = [prompts.prompt(i) for i in range(5)]
    assert len({t.split("\n")[0] for t in texts}) == 5      # the first block differs for every request
    assert all(len(t.split()) == 50 for t in texts)


@pytest.fixture(scope="module")
def plain_engine(module_engine_launcher) -> str:
    """The default latency model: 60 ms + 13 us per input token to the first token, 10 ms steps."""
    return _engine(module_engine_launcher, "plain")


def test_prompts_fit_a_tokenizer_that_does_not_count_one_token_per_word():
    from tasks.adapters.loadgen_prompts import build_prompts

    async def subwords(text: str) -> int:      # words of more than 3 letters are two tokens
        return sum(2 if len(w) > 3 else 1 for w in text.split())

    async def fitted(target: int) -> list[int]:
        prompts = await build_prompts(subwords, target, 12, salt=1)
        assert prompts.exact, prompts.note
        return [await subwords(prompts.prompt(i)) for i in range(12)]

    assert asyncio.run(fitted(300)) == [300] * 12


@timing
def test_120k_token_prompts_stream_correctly(plain_engine):
    url = plain_engine
    n = 120_000
    result, s = _measure(url, input_tokens=n, output_tokens=8, concurrency=2, duration_s=6.0, max_requests=2,
                         warmup_requests=1)
    assert s.completed == 2 and s.failed == 0
    assert result.input_lengths_exact and all(r.prompt_tokens == n for r in result.records)
    assert all(r.completion_tokens == 8 and len(r.chunk_ts) == 8 for r in result.records)
    assert s.ttft.mean == pytest.approx(LatencyModel().prefill_s(n) * 1000, rel=0.05)


def test_failed_requests_are_recorded_not_raised(module_engine_launcher):
    url = _engine(module_engine_launcher, "faulty", PDLIFT_SANDBOX_FAULTS=json.dumps({"error_rate": 0.25}))
    # The window closes at the 40th request; the duration only bounds a very slow machine.
    result, s = _measure(url, input_tokens=20, output_tokens=4, concurrency=4, duration_s=10.0, max_requests=40,
                         warmup_requests=0)
    assert s.requests == 40 and s.failed == 10
    assert {r.error for r in result.records if r.error} == {
        "HTTP 500: Internal server error (injected fault)"}


@timing
def test_poisson_mode_sends_at_the_requested_rate_and_records_the_wait_for_a_slot(plain_engine):
    result, s = _measure(plain_engine, input_tokens=20, output_tokens=2, concurrency=2, duration_s=2.0,
                         max_requests=500, warmup_requests=0, mode="poisson", rate=40.0, seed=3)
    # 40/s for 2 s: Poisson(80), sd ~8.9; 80 +- 4 sd. The arrival times are seeded (not read from
    # the clock), so the count is the same on any machine, and 20/s or 60/s would fall outside.
    assert 44 <= s.requests <= 116 and s.failed == 0
    # Two slots serve ~28 requests/s (70 ms each): the rest queue, and the wait is on record.
    assert s.queue_wait.mean > 50


# --- a server with the quirks real ones have -----------------------------------------------------


@pytest.fixture(scope="module")
def quirky_server():
    """A chat server that sends a role-only chunk at once and content 0.3 s later, has no
    /tokenize, and sends no usage: what a P/D proxy or an older server looks like."""
    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n')
        await asyncio.sleep(0.3)
        for k in range(body["max_tokens"]):
            await resp.write(b'data: {"choices":[{"index":0,"delta":{"content":" w"}}]}\n\n')
            await asyncio.sleep(0.01)
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = runner.addresses[0][1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}"
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=5)
    loop.run_until_complete(runner.cleanup())
    loop.close()


@timing
def test_ttft_is_stamped_on_the_first_content_token_not_on_a_role_only_chunk(quirky_server):
    started = time.monotonic()
    result, s = _measure(quirky_server, input_tokens=30, output_tokens=3, concurrency=1, duration_s=0.5,
                         max_requests=2, warmup_requests=0, chat=True, model="m")
    assert time.monotonic() - started < 10
    assert s.completed == 2 and s.ttft.mean >= 300


def test_without_tokenize_or_usage_the_lengths_are_flagged_approximate(quirky_server):
    result, s = _measure(quirky_server, input_tokens=30, output_tokens=3, concurrency=1, duration_s=0.5,
                         max_requests=1, warmup_requests=0, chat=True, model="m")
    assert not result.input_lengths_exact and "approximate" in result.input_note
    assert result.usage_missing == 1 and result.records[0].completion_tokens == 3
