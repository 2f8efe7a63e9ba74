"""One streamed OpenAI request, timed the way the metrics module defines it (see planning/metrics.py).

What is stamped (``time.perf_counter()``): ``send`` when the request's bytes were handed to the
socket (aiohttp's ``on_request_chunk_sent`` trace; it sends the headers with the body). aiohttp
writes a body from a separate task, so in a burst of 64 sends the last request left the client
about 25 ms after it was due (measured here): stamping before ``post``, as vLLM bench serve does,
counts that client delay as server latency. The delay is kept apart (``Outcome.client_delay_s``,
reported in the queue wait). The JSON body is encoded before ``due`` as well;
every *content* chunk on arrival (all events of one network read share that read's stamp); the
end when the stream closes. A chat stream's role-only first chunk (``delta`` with a role and
empty content) is not a token: TTFT is stamped on the first non-empty ``text``/``content``
(docs/sources.md#role-only-first-chunk). Token counts come from the server's ``usage`` (the request asks
for ``stream_options.include_usage``); without a usage chunk the number of content chunks is
used and ``usage_missing`` says so.

Failures are recorded, never raised: an HTTP status other than 200, an ``error`` event in the
stream, a stream that ends without ``[DONE]``, a timeout or a connection error, and an event
that is not what an OpenAI server sends (not JSON, not an object, fields of the wrong type, an
event of more than ``MAX_EVENT_BYTES``): one such request must not end the benchmark.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

import aiohttp

ERROR_TEXT_LIMIT = 300
MAX_EVENT_BYTES = 4 * 1024 * 1024  # an engine's events are a few KB; beyond this it is not SSE


class MalformedEvent(ValueError):
    """A ``data:`` event that is JSON but not an OpenAI streaming chunk."""


def sent_trace() -> aiohttp.TraceConfig:
    """Stamps ``trace_request_ctx["sent"]`` when the request body has been written."""
    async def sent(_session, context, _params) -> None:
        if isinstance(context.trace_request_ctx, dict):  # only requests that asked for it
            context.trace_request_ctx["sent"] = time.perf_counter()

    config = aiohttp.TraceConfig()
    config.on_request_chunk_sent.append(sent)
    return config


@dataclass
class Outcome:
    send_ts: float
    client_delay_s: float = 0.0          # due -> bytes written (client-side work in a burst)
    end_ts: float = 0.0
    first_token_ts: float | None = None
    chunk_ts: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    usage_missing: bool = False
    error: str | None = None


def payload(model: str, prompt: str, output_tokens: int, chat: bool) -> bytes:
    body: dict = {"model": model, "max_tokens": output_tokens, "ignore_eos": True, "temperature": 0.0,
                  "stream": True, "stream_options": {"include_usage": True}}
    if chat:
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return json.dumps(body, separators=(",", ":")).encode()


def _event(line: bytes) -> dict:
    """The chunk in one ``data:`` line, its fields type-checked as far as they are read here.

    Raises ValueError (JSON) or MalformedEvent: the request is recorded as failed. Before this,
    ``data: [1]``, ``data: null``, ``{"choices": 5}``, ``{"usage": 7}`` or a count of 1e999
    raised AttributeError/TypeError/OverflowError out of ``stream_request`` and ended the whole
    load point (the child process exited 1), and a deeply nested array hit RecursionError."""
    try:
        event = json.loads(line)
    except RecursionError:
        raise MalformedEvent("an event nested too deeply") from None
    if not isinstance(event, dict):
        raise MalformedEvent(f"an event that is not a JSON object: {line[:80]!r}")
    choices = event.get("choices")
    if choices is not None and not (isinstance(choices, list)
                                    and all(isinstance(c, dict) and isinstance(c.get("delta") or {}, dict)
                                            for c in choices)):
        raise MalformedEvent(f"choices is not a list of objects: {line[:80]!r}")
    usage = event.get("usage")
    if usage is not None and not isinstance(usage, dict):
        raise MalformedEvent(f"usage is not an object: {line[:80]!r}")
    return event


def _tokens(usage: dict, key: str) -> int:
    value = usage.get(key) or 0
    try:
        count = int(value)
    except (TypeError, ValueError, OverflowError):
        raise MalformedEvent(f"usage.{key} is not a count: {value!r:.40}") from None
    if count < 0 or isinstance(value, bool):
        raise MalformedEvent(f"usage.{key} is not a count: {value!r:.40}")
    return count


def _content(event: dict, chat: bool) -> bool:
    for choice in event.get("choices") or ():
        if chat:
            if (choice.get("delta") or {}).get("content"):
                return True
        elif choice.get("text"):
            return True
    return False


def _error_text(value: object) -> str:
    """The message of an OpenAI-style error ({"message"} or {"error": {"message"}}), else the text."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            pass
    if isinstance(value, dict):
        inner = value.get("error")
        value = value.get("message") or (inner.get("message") if isinstance(inner, dict) else inner) or value
    return str(value)[:ERROR_TEXT_LIMIT]


async def stream_request(session: aiohttp.ClientSession, url: str, body: bytes, chat: bool,
                         timeout_s: float) -> Outcome:
    """POST ``body`` to ``url`` and time the SSE stream (never raises for request failures).

    The session must carry ``sent_trace()``; without it ``send`` is the moment the call began."""
    due = time.perf_counter()
    out, stamp = Outcome(send_ts=due), {"sent": None}
    done = False
    try:
        async with session.post(url, data=body, headers={"Content-Type": "application/json"},
                                timeout=aiohttp.ClientTimeout(total=timeout_s), trace_request_ctx=stamp) as resp:
            out.send_ts = stamp["sent"] or due
            out.client_delay_s = out.send_ts - due
            if resp.status != 200:
                # The status is the news: a body that is not UTF-8 (resp.text() raised
                # UnicodeDecodeError) or that breaks off used to replace it with the decoding error.
                try:
                    text = (await resp.read()).decode("utf-8", "replace")
                except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as e:
                    text = f"(the body broke off: {type(e).__name__})"
                out.error = f"HTTP {resp.status}: {_error_text(text)}"
                out.end_ts = time.perf_counter()
                return out
            buffer = b""
            chunks = 0
            async for data in resp.content.iter_any():
                now = time.perf_counter()
                # SSE lines may end in CRLF (a proxy's); events were split at LF LF only, so such
                # a stream never matched and every request read as "ended without [DONE]".
                buffer = (buffer + data).replace(b"\r\n", b"\n")
                *events, buffer = buffer.split(b"\n\n")
                if len(buffer) > MAX_EVENT_BYTES:  # never delimited: would grow until the timeout
                    raise MalformedEvent(f"no event boundary in {len(buffer)} bytes: not an SSE stream")
                for raw in events:
                    line = raw.strip()
                    if not line.startswith(b"data:"):
                        continue  # SSE comments and keep-alives
                    line = line[5:].strip()
                    if line == b"[DONE]":
                        done = True
                        continue
                    event = _event(line)
                    if "error" in event:
                        out.error = f"stream error: {_error_text(event['error'])}"
                        continue
                    if _content(event, chat):
                        if out.first_token_ts is None:
                            out.first_token_ts = now
                        out.chunk_ts.append(now)
                        chunks += 1
                    usage = event.get("usage")
                    if usage:
                        out.prompt_tokens = _tokens(usage, "prompt_tokens")
                        out.completion_tokens = _tokens(usage, "completion_tokens")
            out.end_ts = time.perf_counter()
            if not out.completion_tokens:
                out.usage_missing, out.completion_tokens = True, chunks
            if out.error is None and not done:
                out.error = "the stream ended without [DONE]"
    except asyncio.TimeoutError:
        out.error = f"timed out after {timeout_s:g} s"
    except (aiohttp.ClientError, OSError, ValueError) as e:
        # ValueError: an event that is not JSON (json.JSONDecodeError, UnicodeDecodeError) or not
        # an OpenAI chunk (MalformedEvent), a body that is not text.
        out.error = f"{type(e).__name__}: {_error_text(e)}"
    if not out.end_ts:
        out.end_ts = time.perf_counter()
    return out
