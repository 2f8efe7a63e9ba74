"""Test-side helpers: stream an OpenAI request with per-chunk timing, read Prometheus metrics."""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

import aiohttp


@dataclass
class Result:
    status: int = 0
    ttft: float | None = None  # seconds to the first content token
    token_times: list[float] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    usage: dict | None = None
    error: object = None
    done: bool = False
    body: object = None

    @property
    def tpot(self) -> float:
        t = self.token_times
        return (t[-1] - t[0]) / (len(t) - 1)


async def request(session: aiohttp.ClientSession, url: str, body: dict) -> Result:
    result, start = Result(), time.perf_counter()
    async with session.post(url, json=body) as resp:
        result.status = resp.status
        if resp.status != 200 or not body.get("stream"):
            result.body = await resp.json(content_type=None)
            if resp.status != 200:
                result.error = result.body
            return result
        async for raw in resp.content:
            line = raw.strip()
            if not line.startswith(b"data: "):
                continue
            if line == b"data: [DONE]":
                result.done = True
                continue
            event = json.loads(line[6:])
            if "error" in event:
                result.error = event["error"]
                continue
            if event.get("usage"):
                result.usage = event["usage"]
            for choice in event.get("choices", []):
                text = choice.get("text", (choice.get("delta") or {}).get("content"))
                if text:
                    now = time.perf_counter() - start
                    result.ttft = now if result.ttft is None else result.ttft
                    result.token_times.append(now)
                    result.texts.append(text)
    return result


def run(url: str, bodies: list[dict]) -> list[Result]:
    """Send all bodies at once (concurrency = len(bodies)) and wait for every answer."""

    async def main() -> list[Result]:
        async with aiohttp.ClientSession(read_bufsize=1 << 20) as session:
            return await asyncio.gather(*(request(session, url, b) for b in bodies))

    return asyncio.run(main())


def run_one_by_one(url: str, bodies: list[dict]) -> list[Result]:
    """Send the bodies one after another on one connection (concurrency 1)."""

    async def main() -> list[Result]:
        async with aiohttp.ClientSession(read_bufsize=1 << 20) as session:
            return [await request(session, url, b) for b in bodies]

    return asyncio.run(main())


def best_ttft(url: str, prompts: list[str]) -> float:
    """The best TTFT of a few requests at concurrency 1. On a shared machine scheduling noise
    only ever adds delay, so the best run is the engine's own timing."""
    results = run_one_by_one(url, [completion(p, 2) for p in prompts])
    assert all(r.status == 200 for r in results), [r.error for r in results]
    return min(r.ttft for r in results)


def completion(prompt: str, max_tokens: int, stream: bool = True, **extra: object) -> dict:
    body = {"model": "m", "prompt": prompt, "max_tokens": max_tokens, "stream": stream, "ignore_eos": True}
    if stream:
        body["stream_options"] = {"include_usage": True}
    body.update(extra)
    return body


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback, never a proxy
_SAMPLE = re.compile(r'^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$')


def metrics(base_url: str) -> dict[tuple[str, frozenset], float]:
    with _OPENER.open(base_url + "/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m:
            labels = frozenset(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
            out[(m.group(1), labels)] = float(m.group(3))
    return out


def metric(samples: dict, name: str, **labels: str) -> float:
    """The sum of a metric's samples whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


def fetch(url: str, data: bytes | None = None, method: str | None = None) -> tuple[int, bytes]:
    """(status, body) of a plain HTTP call; status 0 when nothing listens."""
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"} if data else {})
    try:
        with _OPENER.open(request, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except urllib.error.URLError:
        return 0, b""


def get_json(url: str) -> object:
    status, body = fetch(url)
    assert status == 200, (url, status, body)
    return json.loads(body)
