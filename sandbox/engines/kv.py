"""KV cache hand-off between a prefill and a decode engine, over a real HTTP side channel.

The prefill engine serves the bootstrap / side-channel port (vLLM: VLLM_MOONCAKE_BOOTSTRAP_PORT,
8998, or VLLM_NIXL_SIDE_CHANNEL_PORT, 5600; SGLang: --disaggregation-bootstrap-port). When a
prefill finishes it parks the request's KV under a transfer id (vLLM: the id it returns in
``kv_transfer_params``; SGLang: the router's ``bootstrap_room``). The decode engine pulls it:
``POST /pdlift/kv/pull`` with the transfer id, its compatibility fields and its own protocol.
The prefill checks compatibility (a mismatch fails the request, as vLLM's compatibility hash
does), counts the bytes as sent, and answers with the size, the protocol both ends agree on
(tcp if either end resolved tcp) and the modelled transfer time; the decode counts them as
received and emits its first token at ``prefill done + transfer time``. Bytes are counted,
not shipped: a 120K-token prompt's KV is 6.6 GB.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

from sandbox.engines.config import EngineConfig
from sandbox.engines.settings import Settings, resolve_host
from sandbox.engines.state import KvCounters, log


class KvError(Exception):
    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


@dataclass
class Parked:
    tokens: int = 0
    done_at: float = 0.0  # wall clock: when the prefill produced the KV and the first token
    error: str = ""
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    created: float = field(default_factory=time.monotonic)


class KvProducer:
    """The prefill side: parked KV by transfer id, and the side-channel HTTP app."""

    def __init__(self, cfg: EngineConfig, settings: Settings, counters: KvCounters):
        self.cfg, self.settings, self.counters = cfg, settings, counters
        self.parked: dict[str, Parked] = {}
        self.ttl_s = float(cfg.env.get("VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT")
                           or cfg.env.get("VLLM_NIXL_ABORT_REQUEST_TIMEOUT") or 480)
        self.wait_s = float(cfg.env.get("SGLANG_DISAGGREGATION_WAITING_TIMEOUT") or 300)

    def _slot(self, transfer_id: str) -> Parked:
        now = time.monotonic()
        for key in [k for k, p in self.parked.items() if now - p.created > self.ttl_s]:
            del self.parked[key]  # never pulled (decode gone): free it like the abort timeout does
        return self.parked.setdefault(transfer_id, Parked())

    def park(self, transfer_id: str, tokens: int, done_at: float) -> None:
        slot = self._slot(transfer_id)
        slot.tokens, slot.done_at = tokens, done_at
        slot.ready.set()

    def fail(self, transfer_id: str, message: str) -> None:
        slot = self._slot(transfer_id)
        slot.error = message
        slot.ready.set()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/pdlift/kv/pull", self._pull)
        app.router.add_get("/health", lambda _r: web.Response(text="ok"))
        return app

    async def _pull(self, request: web.Request) -> web.Response:
        body = await request.json()
        transfer_id = str(body.get("transfer_id"))
        slot = self.parked.get(transfer_id)
        if slot is None and body.get("wait"):
            slot = self._slot(transfer_id)  # SGLang: decode may ask before the prefill is done
        if slot is None:
            self.counters.failed("not_found")
            return web.json_response({"error": f"unknown transfer {transfer_id} (prefill restarted?)",
                                      "reason": "not_found"}, status=404)
        try:
            await asyncio.wait_for(slot.ready.wait(), self.wait_s)
        except asyncio.TimeoutError:
            self.parked.pop(transfer_id, None)
            self.counters.failed("timeout")
            return web.json_response({"error": "timed out waiting for the prefill", "reason": "timeout"}, status=504)
        self.parked.pop(transfer_id, None)
        if slot.error:
            return web.json_response({"error": slot.error, "reason": "prefill_failed"}, status=500)
        mine, theirs = self.cfg.compat(), body.get("compat") or {}
        diff = {k: (mine[k], theirs.get(k)) for k in mine if mine[k] != theirs.get(k)}
        if diff:
            self.counters.failed("incompatible")
            detail = ", ".join(f"{k}: prefill={a!r} decode={b!r}" for k, (a, b) in diff.items())
            log(f"KV compatibility check failed for transfer {transfer_id}: {detail}", "ERROR")
            return web.json_response({"error": f"KV cache compatibility check failed ({detail})",
                                      "reason": "incompatible"}, status=409)
        protocol = "tcp" if "tcp" in (self.counters.protocol, body.get("protocol")) else "efa"
        latency = self.settings.latency
        nbytes = latency.kv_bytes(slot.tokens, self.cfg.kv_cache_dtype)
        seconds = latency.transfer_s(nbytes, protocol)
        self.counters.moved("sent", protocol, nbytes, seconds)
        return web.json_response({"bytes": nbytes, "protocol": protocol, "transfer_s": seconds,
                                  "done_at": slot.done_at, "tokens": slot.tokens})


async def pull(session: aiohttp.ClientSession, cfg: EngineConfig, counters: KvCounters,
               host: str, port: int, transfer_id: str, wait: bool) -> dict:
    """The decode side: fetch a parked KV; returns the prefill's answer (bytes, protocol, ...)."""
    try:
        address = resolve_host(host)
    except LookupError as e:
        counters.failed("unreachable")
        raise KvError("unreachable", str(e)) from e
    payload = {"transfer_id": transfer_id, "compat": cfg.compat(), "protocol": counters.protocol, "wait": wait}
    url = f"http://{address}:{port}/pdlift/kv/pull"
    try:
        async with session.post(url, json=payload) as resp:
            body = await resp.json(content_type=None)
    except (aiohttp.ClientError, ValueError) as e:
        counters.failed("unreachable")
        raise KvError("unreachable", f"KV transfer from {host}:{port} failed: {e}") from e
    if resp.status != 200:
        counters.failed(body.get("reason", "error"))
        raise KvError(body.get("reason", "error"), f"KV transfer failed: {body.get('error')}")
    counters.moved("received", body["protocol"], body["bytes"], body["transfer_s"])
    return body
