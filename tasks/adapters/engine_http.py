"""HTTP to the serving stack's pods: JSON reads, a streamed completion (the canary), metrics.

Synchronous httpx, never through a proxy from the environment (``trust_env=False``): the pods
are reached at their pod IPs from inside the VPC. Metrics come back as ``Sample`` records
(``tasks.parsing.prometheus``).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import httpx

from tasks.errors import RemoteUnavailable, StackNotReady
from tasks.parsing.prometheus import Sample, parse_prometheus


@dataclass(frozen=True)
class Completion:
    ttft_s: float  # send -> first content chunk
    e2e_s: float
    chunks: int
    text: str


class EngineHttp:
    def __init__(self, timeout_s: float = 10.0, transport: httpx.BaseTransport | None = None):
        self._client = httpx.Client(timeout=timeout_s, trust_env=False, transport=transport)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> "EngineHttp":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def get_json(self, url: str) -> dict:
        response = self._request("GET", url)
        try:
            return response.json()
        except ValueError as e:
            raise StackNotReady(f"GET {url}: the answer is not JSON: {response.text[:200]!r}") from e

    def metrics(self, url: str) -> list[Sample]:
        return parse_prometheus(self._request("GET", url).text)

    def stream_completion(self, url: str, model: str, prompt: str, max_tokens: int,
                          timeout_s: float) -> Completion:
        """POST an OpenAI streaming completion; time the first content chunk like a client does."""
        body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "stream": True,
                "temperature": 0.0, "ignore_eos": True}
        sent = time.perf_counter()
        first, chunks, text = None, 0, []
        try:
            with self._client.stream("POST", url, json=body, timeout=timeout_s) as response:
                if response.status_code >= 400:
                    detail = response.read().decode(errors="replace")[:500]
                    raise StackNotReady(f"POST {url}: {response.status_code}: {detail}")
                for line in response.iter_lines():
                    if time.perf_counter() - sent > timeout_s:
                        raise StackNotReady(f"POST {url}: no end of stream after {timeout_s:.0f}s")
                    piece = _sse_text(line, url)
                    if piece is None:
                        continue
                    if piece:
                        first = first if first is not None else time.perf_counter()
                        chunks += 1
                        text.append(piece)
        except httpx.HTTPError as e:
            raise RemoteUnavailable(f"POST {url}: {type(e).__name__}: {e}") from e
        end = time.perf_counter()
        if first is None:
            raise StackNotReady(f"POST {url}: the stream ended without a token")
        return Completion(first - sent, end - sent, chunks, "".join(text))

    def _request(self, method: str, url: str) -> httpx.Response:
        try:
            response = self._client.request(method, url)
        except httpx.HTTPError as e:
            raise RemoteUnavailable(f"{method} {url}: {type(e).__name__}: {e}") from e
        if response.status_code >= 400:
            raise StackNotReady(f"{method} {url}: {response.status_code}: {response.text[:300]}")
        return response


def _sse_text(line: str, url: str) -> str | None:
    """The text of one ``data:`` event; None for anything that carries no choice."""
    if not line.startswith("data:"):
        return None
    data = line[5:].strip()
    if data == "[DONE]":
        return None
    try:
        event = json.loads(data)
    except ValueError:
        return None
    if "error" in event:
        raise StackNotReady(f"POST {url}: error in the stream: {event['error']}")
    choices = event.get("choices") or []
    return "".join(str(c.get("text") or "") for c in choices) if choices else None
