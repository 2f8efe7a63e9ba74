"""The load generator's event loop (see ``loadgen`` for what it measures and why).

Runs in a process of its own, started by ``loadgen.run_load``: ``python -m
tasks.adapters.loadgen_run`` reads a ``LoadSpec`` as JSON on stdin and writes the ``LoadResult``
as JSON on stdout. A pdlift error becomes ``{"error": class name, "message": ...}`` and exit
code 3, so the caller raises the same class.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, field, replace

import aiohttp

from tasks.adapters.loadgen import (API_KEY_ENV, CPU_SATURATED, LAG_MEAN_SATURATED_S, LAG_P99_SATURATED_S, LAG_TICK_S,
                                    NO_TOKENIZE, READ_BUFSIZE, LoadResult, LoadSpec, spec_from_dict)
from tasks.adapters.loadgen_http import Outcome, payload, sent_trace, stream_request
from tasks.adapters.loadgen_prompts import PromptSet, build_prompts
from tasks.errors import ConfigError, PdliftError, RemoteUnavailable
from tasks.planning.metrics import RequestRecord, percentile


@dataclass
class _LagMonitor:
    samples: list[float] = field(default_factory=list)
    stopped: bool = False

    async def run(self) -> None:
        while not self.stopped:
            due = time.perf_counter() + LAG_TICK_S
            await asyncio.sleep(LAG_TICK_S)
            self.samples.append(max(0.0, time.perf_counter() - due))


async def _get_json(session: aiohttp.ClientSession, method: str, url: str, **kw) -> tuple[int, object]:
    try:
        async with session.request(method, url, timeout=aiohttp.ClientTimeout(total=120), **kw) as resp:
            return resp.status, await resp.json(content_type=None)
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
        raise RemoteUnavailable(f"benchmark target {url} did not answer ({type(e).__name__}: {e})") from e
    except ValueError:
        return 0, None


async def _model(session: aiohttp.ClientSession, spec: LoadSpec) -> str:
    if spec.model:
        return spec.model
    status, body = await _get_json(session, "GET", spec.base_url + "/v1/models")
    try:
        return body["data"][0]["id"]
    except (TypeError, KeyError, IndexError):
        raise ConfigError(f"{spec.base_url}/v1/models answered {status} without a model; "
                          "pass the model name explicitly") from None


def _tokenizer(session: aiohttp.ClientSession, spec: LoadSpec, model: str):
    url = spec.base_url + "/tokenize"

    async def tokenize(text: str) -> int | None:
        body: dict = {"model": model}
        if spec.chat:
            body.update(messages=[{"role": "user", "content": text}], add_generation_prompt=True)
        else:
            body.update(prompt=text, add_special_tokens=True)
        status, answer = await _get_json(session, "POST", url, json=body)
        if status in NO_TOKENIZE or not isinstance(answer, dict) or "count" not in answer:
            return None
        count = answer["count"]
        # Only a count is a count: int("many"), int(None) and int(1e999) raised out of the load
        # point, and a negative one sized the padding of a prompt (pads = target - count) at
        # gigabytes. Anything else is a server without a usable /tokenize: lengths approximate.
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            return None
        return count

    return tokenize


def _record(spec: LoadSpec, o: Outcome, queue_wait: float) -> RequestRecord:
    return RequestRecord(scenario=spec.scenario, concurrency=spec.concurrency, repeat=spec.repeat,
                         send_ts=o.send_ts, first_token_ts=o.first_token_ts, chunk_ts=tuple(o.chunk_ts),
                         end_ts=o.end_ts, prompt_tokens=o.prompt_tokens, completion_tokens=o.completion_tokens,
                         error=o.error, queue_wait_s=queue_wait + o.client_delay_s)


class _Sender:
    def __init__(self, session: aiohttp.ClientSession, spec: LoadSpec, model: str, prompts: PromptSet):
        self.session, self.spec, self.model, self.prompts = session, spec, model, prompts
        self.url = spec.base_url + ("/v1/chat/completions" if spec.chat else "/v1/completions")

    async def send(self, index: int) -> Outcome:
        body = payload(self.model, self.prompts.prompt(index), self.spec.output_tokens, self.spec.chat)
        return await stream_request(self.session, self.url, body, self.spec.chat, self.spec.request_timeout_s)

    async def fixed(self, first: int, count: int, concurrency: int,
                    deadline: float) -> list[tuple[int, Outcome, float]]:
        """``concurrency`` workers send requests first..first+count-1 until the deadline."""
        done: list[tuple[int, Outcome, float]] = []
        issued = 0

        async def worker() -> None:
            nonlocal issued
            while issued < count and time.perf_counter() < deadline:
                index = first + issued
                issued += 1
                done.append((index, await self.send(index), 0.0))

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return done

    async def staggered(self, first: int, count: int, spread_s: float,
                        duration: float) -> tuple[list[tuple[int, Outcome, float]], list, float, float]:
        """Fixed concurrency without synchronised waves, and at full concurrency throughout.

        Worker i sends its first request i/C of ``spread_s`` (one request's latency) after the
        start; what is sent during that ramp is warm-up. Measured are the requests sent in the
        window [start + spread_s, + duration), at most ``count``. After the window the workers
        keep sending (cool-down, discarded and cancelled at the end) until the last measured
        request is done, so no measured request runs beside fewer than C - 1 others.
        Returns (ramp, measured, window start, window length): the window closes at its
        deadline, or when the ``count``-th request is sent."""
        concurrency = self.spec.concurrency
        begin = time.perf_counter() + spread_s
        deadline = begin + duration
        ramp: list[tuple[int, Outcome, float]] = []
        measured: list[tuple[int, Outcome, float]] = []
        next_index, in_window, in_flight, closed = first, 0, 0, deadline
        finished = asyncio.Event()

        async def cool_down(index: int) -> None:
            send = asyncio.ensure_future(self.send(index))
            stop = asyncio.ensure_future(finished.wait())
            await asyncio.wait({send, stop}, return_when=asyncio.FIRST_COMPLETED)
            for future in (send, stop):
                future.cancel()

        async def worker(i: int) -> None:
            nonlocal next_index, in_window, in_flight, closed
            await asyncio.sleep(i * spread_s / concurrency)
            while not finished.is_set():
                now = time.perf_counter()
                index, next_index = next_index, next_index + 1
                if now < begin:
                    ramp.append((index, await self.send(index), 0.0))
                elif now < deadline and in_window < count:
                    in_window, in_flight = in_window + 1, in_flight + 1
                    if in_window == count:
                        closed = now
                    measured.append((index, await self.send(index), 0.0))
                    in_flight -= 1
                    if in_flight == 0 and (time.perf_counter() >= deadline or in_window >= count):
                        finished.set()
                elif in_flight:
                    await cool_down(index)
                else:
                    finished.set()

        await asyncio.gather(*(worker(i) for i in range(concurrency)))
        return ramp, measured, begin, max(closed - begin, 1e-9)

    async def poisson(self, first: int, count: int, rate: float, start: float,
                      duration: float) -> list[tuple[int, Outcome, float]]:
        rng, offsets, t = random.Random(self.spec.seed * 1_000_003 + self.spec.repeat), [], 0.0
        while len(offsets) < count:
            t += rng.expovariate(rate)
            if t > duration:
                break
            offsets.append(t)
        slots = asyncio.Semaphore(self.spec.concurrency)
        done: list[tuple[int, Outcome, float]] = []

        async def one(index: int, due: float) -> None:
            async with slots:
                waited = max(0.0, time.perf_counter() - due)
                done.append((index, await self.send(index), waited))

        tasks = []
        for k, offset in enumerate(offsets):
            delay = start + offset - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(first + k, start + offset)))
        await asyncio.gather(*tasks)
        return done


def _auth() -> dict[str, str] | None:
    """The endpoint's key, from the environment ``loadgen.run_load`` gave this process."""
    key = os.environ.get(API_KEY_ENV)
    return {"Authorization": f"Bearer {key}"} if key else None


async def _run(spec: LoadSpec) -> LoadResult:
    connector = aiohttp.TCPConnector(limit=spec.concurrency, limit_per_host=spec.concurrency)
    async with aiohttp.ClientSession(connector=connector, read_bufsize=READ_BUFSIZE, trust_env=False,
                                     timeout=aiohttp.ClientTimeout(total=None), headers=_auth(),
                                     trace_configs=[sent_trace()]) as session:
        model = await _model(session, spec)
        salt = spec.salt if spec.salt is not None else random.SystemRandom().randrange(1_000_000)
        warmups = max(spec.warmup_requests, spec.concurrency) if spec.warmup_requests else 0
        prompts = await build_prompts(_tokenizer(session, spec, model), spec.input_tokens,
                                      warmups + 2 * spec.concurrency + spec.max_requests, salt)
        sender = _Sender(session, spec, model, prompts)
        warm = await sender.fixed(0, warmups, spec.concurrency, time.perf_counter() + spec.request_timeout_s)
        latencies = [o.end_ts - o.send_ts for _, o, _ in warm if o.error is None]
        latency = sum(latencies) / len(latencies) if latencies else 0.0
        rate = spec.rate
        if spec.mode == "poisson" and rate is None:
            if not latencies:
                raise RemoteUnavailable(f"{spec.scenario}: no warm-up request succeeded, so the Poisson rate "
                                        "cannot be derived; give a rate or check the target")
            rate = spec.concurrency / latency
        gc.collect()
        gc.freeze()
        monitor = _LagMonitor()
        ticker = asyncio.create_task(monitor.run())
        cpu0, started = time.process_time(), time.perf_counter()
        t0, window = started, None
        try:
            if spec.mode == "poisson":
                done = await sender.poisson(warmups, spec.max_requests, rate, t0, spec.duration_s)
            else:
                spread = latency if spec.stagger else 0.0
                ramp, done, t0, window = await sender.staggered(warmups, spec.max_requests, spread,
                                                                spec.duration_s)
                warm += ramp
        finally:
            t1, cpu1 = time.perf_counter(), time.process_time()
            monitor.stopped = True
            await ticker
            gc.unfreeze()
    return _result(spec, model, prompts, warm, done, rate, t0, t1, cpu1 - cpu0, t1 - started, monitor.samples,
                   window)


def _result(spec: LoadSpec, model: str, prompts: PromptSet, warm: list, done: list, rate: float | None,
            t0: float, t1: float, cpu_s: float, cpu_wall_s: float, lags: list[float],
            window: float | None) -> LoadResult:
    done.sort(key=lambda item: item[1].send_ts)
    records = tuple(_record(spec, o, wait) for _, o, wait in done)
    end = max((r.end_ts for r in records), default=t1)
    share = cpu_s / max(cpu_wall_s, 1e-9)
    lag_p99 = percentile(lags, 99) if lags else 0.0
    lag_mean = sum(lags) / len(lags) if lags else 0.0
    reasons = []
    if share > CPU_SATURATED:
        reasons.append(f"client CPU at {share:.0%} of a core (> {CPU_SATURATED:.0%})")
    if lag_mean > LAG_MEAN_SATURATED_S:
        reasons.append(f"event-loop lag {lag_mean * 1000:.1f} ms on average (> {LAG_MEAN_SATURATED_S * 1000:.0f} ms)")
    if lag_p99 > LAG_P99_SATURATED_S:
        reasons.append(f"event-loop lag p99 {lag_p99 * 1000:.1f} ms (> {LAG_P99_SATURATED_S * 1000:.0f} ms)")
    completed = [r for r in records if r.completed]
    exact = prompts.exact and all(r.prompt_tokens == spec.input_tokens for r in completed)
    note = prompts.note
    if prompts.exact and not exact:
        wrong = sorted({r.prompt_tokens for r in completed if r.prompt_tokens != spec.input_tokens})[:5]
        note += f"; but the server's usage reported {wrong} prompt tokens for some requests"
    return LoadResult(
        spec=replace(spec, rate=rate) if spec.mode == "poisson" else spec, model=model, records=records,
        warmup_requests=len(warm), duration_s=window or max(end - t0, 1e-9), client_cpu_s=cpu_s, client_cpu_share=share,
        loop_lag_mean_s=lag_mean, loop_lag_p99_s=lag_p99, loop_lag_max_s=max(lags, default=0.0),
        saturated=bool(reasons),
        saturation="; ".join(reasons) or None, input_lengths_exact=exact, input_note=note,
        usage_missing=sum(1 for _, o, _ in done if o.usage_missing), rate=rate)


def run_in_process(spec: LoadSpec) -> LoadResult:
    spec.check()
    return asyncio.run(_run(spec))


def main() -> int:
    spec = spec_from_dict(json.load(sys.stdin))
    try:
        result = run_in_process(spec)
    except PdliftError as e:
        json.dump({"error": type(e).__name__, "message": str(e)}, sys.stdout)
        return 3
    json.dump(asdict(result), sys.stdout, separators=(",", ":"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
