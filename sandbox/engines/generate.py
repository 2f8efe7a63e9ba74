"""OpenAI completions and chat completions on the latency model (see ``latency``)."""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from dataclasses import dataclass

import aiohttp
from aiohttp import web

from sandbox.engines import tokenizer
from sandbox.engines.kv import KvError, KvProducer, pull
from sandbox.engines.settings import advertised_address
from sandbox.engines.state import EngineState, log
from sandbox.engines.stream import Emitter


class ApiError(Exception):
    def __init__(self, status: int, message: str, kind: str = "BadRequestError"):
        super().__init__(message)
        self.status, self.kind = status, kind

    def response(self) -> web.Response:
        body = {"object": "error", "message": str(self), "type": self.kind, "param": None, "code": self.status}
        return web.json_response(body, status=self.status)


@dataclass
class GenRequest:
    chat: bool
    model: str
    prompt_tokens: int
    max_tokens: int | None
    stream: bool
    include_usage: bool
    ignore_eos: bool
    min_tokens: int
    prompt_key: str
    kv_params: dict
    bootstrap: tuple[str, int, str] | None
    start_wall: float


def _start_wall(request: web.Request) -> float:
    """When the request entered the system: a router's stamp if sane (it absorbs router hops)."""
    now = time.time()
    try:
        stamp = float(request.headers.get("X-Pdlift-Request-Start", ""))
    except ValueError:
        return now
    return stamp if 0 <= now - stamp < 60 else now


def parse(state: EngineState, body: dict, chat: bool, start_wall: float) -> GenRequest:
    cfg = state.cfg
    model = body.get("model") or cfg.served_names[0]
    if model not in cfg.served_names:
        raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError")
    try:
        if chat:
            n = tokenizer.count_messages(body.get("messages"))
            key = tokenizer.messages_text(body["messages"])
        else:
            n = tokenizer.count_prompt(body.get("prompt"))
            key = body["prompt"] if isinstance(body["prompt"], str) else str(len(body["prompt"]))
    except (ValueError, KeyError) as e:
        raise ApiError(400, str(e)) from e
    max_tokens = body.get("max_completion_tokens") if chat else None
    max_tokens = body.get("max_tokens", max_tokens)
    if max_tokens is None and not chat:
        max_tokens = 16  # the OpenAI/vLLM default for completions
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        raise ApiError(400, "max_tokens must be a positive integer")
    limit = cfg.max_model_len
    if n + (max_tokens or 0) > limit:
        raise ApiError(400, f"This model's maximum context length is {limit} tokens. However, you requested "
                       f"{n + (max_tokens or 0)} tokens ({n} in the messages, {max_tokens or 0} in the completion).")
    bootstrap = None
    if body.get("bootstrap_room") is not None and body.get("bootstrap_host"):
        bootstrap = (str(body["bootstrap_host"]), int(body.get("bootstrap_port") or 8998), str(body["bootstrap_room"]))
    return GenRequest(
        chat=chat, model=model, prompt_tokens=n, max_tokens=max_tokens, stream=bool(body.get("stream")),
        include_usage=bool((body.get("stream_options") or {}).get("include_usage")),
        ignore_eos=bool(body.get("ignore_eos")), min_tokens=int(body.get("min_tokens") or 0), prompt_key=key,
        kv_params=body.get("kv_transfer_params") or {}, bootstrap=bootstrap, start_wall=start_wall,
    )


def _output_length(state: EngineState, req: GenRequest, produce: bool) -> tuple[int, str]:
    if produce:
        return 1, "length"  # a prefill engine in PD mode produces the first token only
    room = state.cfg.max_model_len - req.prompt_tokens
    cap = min(req.max_tokens or room, room)
    if req.ignore_eos:
        return cap, "length"
    natural = max(req.min_tokens, tokenizer.natural_length(req.prompt_key))
    return (cap, "length") if natural >= cap else (natural, "stop")


async def _sleep_until_wall(wall: float) -> None:
    delay = wall - time.time()
    if delay > 0:
        await asyncio.sleep(delay)


async def _local_prefill(state: EngineState, req: GenRequest, queued: bool) -> float:
    """Compute the prefill here; returns the wall time the first token is due."""
    latency = state.settings.latency
    if state.prefill_slots is None:
        start = time.time() if queued else req.start_wall
        return start + latency.prefill_s(req.prompt_tokens)
    async with state.prefill_slots:
        start = time.time() if (queued or state.prefill_slots.locked()) else req.start_wall
        due = start + latency.prefill_s(req.prompt_tokens)
        await _sleep_until_wall(due)
        return due


async def handle(state: EngineState, request: web.Request, chat: bool, producer: KvProducer | None,
                 session: aiohttp.ClientSession) -> web.StreamResponse:
    start_wall = _start_wall(request)
    if not state.ready():
        return ApiError(503, "The engine is not ready yet.", "ServiceUnavailableError").response()
    try:
        body = await request.json()
        req = parse(state, body if isinstance(body, dict) else {}, chat, start_wall)
    except ValueError:
        return ApiError(400, "request body is not valid JSON").response()
    except ApiError as e:
        return e.response()
    cfg = state.cfg
    produce = bool(req.kv_params.get("do_remote_decode")) or (req.bootstrap is not None and cfg.role == "prefill")
    faults = state.settings.faults
    # The recompute fault: a decode engine that ignores the prefill's KV and computes it again.
    remote = cfg.kv is not None and cfg.role != "prefill" and not faults.recompute and (
        bool(req.kv_params.get("do_remote_prefill")) or req.bootstrap is not None)
    transfer_id = req.bootstrap[2] if req.bootstrap else uuid.uuid4().hex
    fail_now = state.next_is_error()
    if fail_now and faults.error_mode == "http":
        state.metrics.inc("pdlift_sandbox_request_errors_total", reason="injected")
        if produce and producer:
            producer.fail(transfer_id, "prefill failed (injected error)")
        return ApiError(500, "Internal server error (injected fault)", "InternalServerError").response()

    queued = state.slots.locked()
    state.waiting += 1
    t_queue = time.time()
    await state.slots.acquire()
    state.waiting -= 1
    state.metrics.observe(state.queue_metric, time.time() - t_queue)
    state.admitted()
    try:
        first_due = None
        if remote:
            first_due, kv_error = await _pull_kv(state, req, session)
            if kv_error and cfg.kv.load_failure_policy != "recompute":
                state.metrics.inc("pdlift_sandbox_request_errors_total", reason="kv_transfer")
                return ApiError(500, kv_error, "InternalServerError").response()
        if first_due is None:
            first_due = await _local_prefill(state, req, queued)
            state.prompt_tokens("local_compute", req.prompt_tokens)
        else:  # vLLM loads every prompt token but the last, which decode computes for its logits
            state.prompt_tokens("external_kv_transfer", req.prompt_tokens - 1)
            state.prompt_tokens("local_compute", 1)
        kv_out = None
        out_len, finish = _output_length(state, req, produce)
        if produce and producer:
            kv_out = _kv_params_out(state, req, transfer_id)
            if state.prefill_slots is None and not req.stream:
                # The KV's ready time is known now: answer the router at once and let the decode
                # engine wait for it, so router hops stay out of the measured TTFT.
                producer.park(transfer_id, req.prompt_tokens, first_due)
                state.activity.busy_until(first_due)   # the modelled prefill still runs on the GPUs
                response = Emitter(state, req, out_len, finish, kv_out, fail_now).respond_ahead(first_due)
                state.finished_one()
                return response
            await _sleep_until_wall(first_due)
            producer.park(transfer_id, req.prompt_tokens, first_due)
        emitter = Emitter(state, req, out_len, finish, kv_out, error_after_first=fail_now)
        response = await emitter.run(request, first_due)
        state.finished_one()
        return response
    finally:
        state.released()
        state.slots.release()


async def _pull_kv(state: EngineState, req: GenRequest,
                   session: aiohttp.ClientSession) -> tuple[float | None, str]:
    """(the first token's due time, "") after pulling the KV, or (None, why it failed)."""
    if req.bootstrap:
        host, port, room = req.bootstrap
        args = (host, port, room, True)
    else:
        p = req.kv_params
        args = (str(p.get("remote_host")), int(p.get("remote_port") or 0),
                str(p.get("remote_request_id") or p.get("transfer_id")), False)
    state.metrics.inc(state.prefix + "external_prefix_cache_queries_total", req.prompt_tokens)
    try:
        if state.settings.faults.kv_transfer_fail:
            state.kv.failed("transfer")
            raise KvError("transfer", "KV transfer failed: the transfer engine reported an error (injected fault)")
        info = await pull(session, state.cfg, state.kv, *args)
    except KvError as e:
        log(f"KV load failed for request: {e}"
            + (" (kv_load_failure_policy=recompute: recomputing)" if state.cfg.kv.load_failure_policy == "recompute"
               else ""), "ERROR")
        return None, str(e)
    state.metrics.inc(state.prefix + "external_prefix_cache_hits_total", info["tokens"])
    return float(info["done_at"]) + float(info["transfer_s"]), ""


def _kv_params_out(state: EngineState, req: GenRequest, transfer_id: str) -> dict:
    cfg = state.cfg
    blocks = math.ceil(req.prompt_tokens / max(1, cfg.block_size))
    return {
        "do_remote_prefill": True, "do_remote_decode": False, "remote_engine_id": state.engine_id,
        "remote_block_ids": list(range(blocks)), "remote_host": advertised_address(),
        "remote_port": cfg.bootstrap_port, "remote_request_id": transfer_id, "tp_size": cfg.tp,
    }
