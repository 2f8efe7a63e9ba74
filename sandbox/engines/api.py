"""HTTP routes of one engine rank: OpenAI API, /tokenize, /health, /metrics, server info."""

from __future__ import annotations

import aiohttp
from aiohttp import web

from sandbox.engines import generate, tokenizer
from sandbox.engines.kv import KvProducer
from sandbox.engines.state import EngineState

MAX_BODY = 64 * 1024 * 1024  # a 200K-token prompt is ~1.4 MB of JSON; leave room
VLLM_VERSION = "0.22.0"


def _not_ready() -> web.Response:
    return generate.ApiError(503, "The engine is not ready yet.", "ServiceUnavailableError").response()


def _bearer_check(key: str):
    """vLLM's --api-key: every path under /v1 needs ``Authorization: Bearer <key>``, else 401
    ``{"error": "Unauthorized"}``; /health, /tokenize and /metrics stay open (vllm
    vllm/entrypoints/openai/api_server.py, AuthenticationMiddleware)."""
    expected = f"Bearer {key}"

    @web.middleware
    async def check(request: web.Request, handler):
        if request.path.startswith("/v1") and request.method != "OPTIONS" and \
                request.headers.get("Authorization") != expected:
            return web.json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)

    return check


def engine_app(state: EngineState, producer: KvProducer | None, session: aiohttp.ClientSession) -> web.Application:
    cfg = state.cfg
    middlewares = [_bearer_check(cfg.api_key)] if cfg.api_key and cfg.engine == "vllm" else []
    app = web.Application(client_max_size=MAX_BODY, middlewares=middlewares)

    async def health(_request: web.Request) -> web.Response:
        return web.Response(status=200) if state.ready() else web.Response(status=503)

    async def models(_request: web.Request) -> web.Response:
        if not state.ready():
            return _not_ready()
        data = [{"id": name, "object": "model", "created": int(state.started), "owned_by": cfg.engine,
                 "root": cfg.model, "parent": None, "max_model_len": cfg.max_model_len}
                for name in cfg.served_names]
        return web.json_response({"object": "list", "data": data})

    async def tokenize(request: web.Request) -> web.Response:
        try:
            body = await request.json()
            if "messages" in body:
                count = tokenizer.count_messages(body["messages"])
                tokens = tokenizer.token_ids(tokenizer.messages_text(body["messages"]))
            else:
                prompt = body.get("prompt")
                count = tokenizer.count_prompt(prompt)
                tokens = prompt if isinstance(prompt, list) else tokenizer.token_ids(prompt)
        except (ValueError, AttributeError, TypeError) as e:
            return generate.ApiError(400, f"cannot tokenize: {e}").response()
        return web.json_response({"count": count, "max_model_len": cfg.max_model_len,
                                  "tokens": tokens, "token_strs": None})

    async def metrics(_request: web.Request) -> web.Response:
        if not cfg.metrics_enabled:
            raise web.HTTPNotFound()
        return web.Response(text=state.render_metrics(), content_type="text/plain", charset="utf-8",
                            headers={"X-Prometheus-Format": "0.0.4"})

    async def completions(request: web.Request) -> web.StreamResponse:
        return await generate.handle(state, request, False, producer, session)

    async def chat(request: web.Request) -> web.StreamResponse:
        return await generate.handle(state, request, True, producer, session)

    async def server_info(_request: web.Request) -> web.Response:
        return web.json_response({
            "model_path": cfg.model, "served_model_name": cfg.served_names[0], "tp_size": cfg.tp,
            "pp_size": cfg.pp, "dp_size": cfg.dp, "disaggregation_mode": cfg.role,
            "kv_cache_dtype": cfg.kv_cache_dtype, "page_size": cfg.block_size,
            "disaggregation_bootstrap_port": cfg.bootstrap_port or None,
            "max_running_requests": cfg.max_num_seqs, "context_length": cfg.max_model_len,
        })

    r = app.router
    r.add_get("/health", health)
    r.add_get("/v1/models", models)
    r.add_post("/tokenize", tokenize)
    r.add_get("/metrics", metrics)
    r.add_post("/v1/completions", completions)
    r.add_post("/v1/chat/completions", chat)
    if cfg.engine == "vllm":
        r.add_get("/version", lambda _r: web.json_response({"version": VLLM_VERSION}))
        r.add_get("/ping", health)
    else:
        r.add_get("/health_generate", health)
        r.add_get("/get_server_info", server_info)
        r.add_get("/server_info", server_info)
        r.add_get("/get_model_info", lambda _r: web.json_response(
            {"model_path": cfg.model, "tokenizer_path": cfg.model, "is_generation": True}))
    return app


def health_only_app(states: list[EngineState]) -> web.Application:
    """SGLang node-rank > 0 dummy health server; vLLM's DP supervisor (/health, /readyz)."""
    app = web.Application()

    async def health(_request: web.Request) -> web.Response:
        return web.Response(status=200 if all(s.ready() for s in states) else 503)

    app.router.add_get("/health", health)
    app.router.add_get("/readyz", health)
    app.router.add_get("/health_generate", health)
    return app
