"""Emit a generation on schedule: SSE chunks one token at a time, or one JSON body at the end."""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid
from typing import TYPE_CHECKING

from aiohttp import web

from sandbox.engines import tokenizer

if TYPE_CHECKING:
    from sandbox.engines.generate import GenRequest
    from sandbox.engines.state import EngineState


def _sse(obj: object) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


class Emitter:
    def __init__(self, state: "EngineState", req: "GenRequest", out_len: int, finish: str,
                 kv_out: dict | None, error_after_first: bool):
        self.state, self.req, self.out_len, self.finish = state, req, out_len, finish
        self.kv_out, self.error_after_first = kv_out, error_after_first
        self.latency = state.settings.latency  # one model for the whole request
        self.id = ("chatcmpl-" if req.chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        # Token chunks differ only in the text and the finish reason: render the rest once.
        head, _, tail = _sse(self._chunk("\x00", None)).partition(b'"\\u0000"')
        self._head, self._tail = head, tail

    # --- payloads -------------------------------------------------------------------------

    def _usage(self, generated: int) -> dict:
        n = self.req.prompt_tokens
        return {"prompt_tokens": n, "total_tokens": n + generated, "completion_tokens": generated,
                "prompt_tokens_details": None}

    def _chunk(self, text: str | None, finish: str | None, role: bool = False) -> dict:
        if self.req.chat:
            delta = {"role": "assistant", "content": ""} if role else {"content": text}
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            kind = "chat.completion.chunk"
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "stop_reason": None}
            kind = "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.req.model, "choices": [choice]}

    def _whole_body(self, text: str, generated: int) -> dict:
        if self.req.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text, "tool_calls": []},
                      "logprobs": None, "finish_reason": self.finish, "stop_reason": None}
            kind = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": self.finish,
                      "stop_reason": None, "prompt_logprobs": None}
            kind = "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.req.model,
                "choices": [choice], "usage": self._usage(generated), "kv_transfer_params": self.kv_out}

    # --- schedule -------------------------------------------------------------------------

    async def _tokens(self, first_due_wall: float):
        """Yield token indexes at their due times: the first at first_due, then one step apart.

        Steps count from when the first token actually went out, so a late first token (a busy
        CPU) does not shorten the gaps after it: TPOT stays what the model says.
        """
        loop = asyncio.get_running_loop()
        due = loop.time() + (first_due_wall - time.time())
        for k in range(self.out_len):
            if k:
                due += self.latency.step_s(self.state.running, self.req.prompt_tokens)
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            if not k:
                due = max(due, loop.time())
            yield k

    def _record(self, first_wall: float | None, last_wall: float, generated: int, reason: str) -> None:
        m, p, n = self.state.metrics, self.state.prefix, self.req.prompt_tokens
        if first_wall is not None:
            m.observe(p + "time_to_first_token_seconds", first_wall - self.req.start_wall)
        m.observe(p + "e2e_request_latency_seconds", last_wall - self.req.start_wall)
        m.inc(p + "prompt_tokens_total", n)
        m.inc(p + "generation_tokens_total", generated)
        m.inc(p + "request_success_total", finished_reason=reason)
        if self.state.cfg.role != "prefill" and generated > 1:
            # Verification steps: each emits its accepted drafts and one token of its own.
            k, share = self.state.cfg.spec_tokens, self.state.settings.latency.spec_acceptance
            self.state.drafted(math.ceil((generated - 1) / (1.0 + share * k)) if k else 0)

    def respond_ahead(self, first_due_wall: float) -> web.Response:
        """A PD prefill's one-token answer, sent before its modelled finish (metrics as modelled)."""
        self._record(first_due_wall, first_due_wall, self.out_len, self.finish)
        return web.json_response(self._whole_body(tokenizer.output_word(0), self.out_len))

    async def run(self, request: web.Request, first_due_wall: float) -> web.StreamResponse:
        if self.req.stream:
            return await self._stream(request, first_due_wall)
        words, first = [], None
        async for k in self._tokens(first_due_wall):
            words.append(tokenizer.output_word(k))
            first = first or time.time()
        self._record(first, time.time(), self.out_len, self.finish)
        if self.error_after_first:
            self.state.metrics.inc("pdlift_sandbox_request_errors_total", reason="injected")
            body = {"object": "error", "message": "Internal server error (injected fault)",
                    "type": "InternalServerError", "param": None, "code": 500}
            return web.json_response(body, status=500)
        return web.json_response(self._whole_body("".join(words), self.out_len))

    async def _stream(self, request: web.Request, first_due_wall: float) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        first, prev, generated, m = None, None, 0, self.state.metrics
        try:
            async for k in self._tokens(first_due_wall):
                now = time.time()
                if k == 0:
                    first = now
                    if self.req.chat:  # vLLM sends the role chunk with the first output
                        await resp.write(_sse(self._chunk(None, None, role=True)))
                else:
                    m.observe(self.state.prefix + "inter_token_latency_seconds", now - prev)
                prev = now
                last = k == self.out_len - 1
                if last:
                    await resp.write(_sse(self._chunk(tokenizer.output_word(k), self.finish)))
                else:
                    await resp.write(self._head + json.dumps(tokenizer.output_word(k)).encode() + self._tail)
                generated += 1
                if self.error_after_first:
                    m.inc("pdlift_sandbox_request_errors_total", reason="injected")
                    await resp.write(_sse({"error": {"object": "error", "message": "Internal server error "
                                                     "(injected fault)", "type": "InternalServerError",
                                                     "code": 500}}))
                    break
            else:
                if self.req.include_usage:
                    final = self._chunk(None, None)
                    final["choices"], final["usage"] = [], self._usage(generated)
                    await resp.write(_sse(final))
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
        except (ConnectionResetError, RuntimeError):
            self._record(first, time.time(), generated, "abort")  # the client went away
            return resp
        self._record(first, time.time(), generated, "error" if self.error_after_first else self.finish)
        return resp
