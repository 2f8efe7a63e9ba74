"""The PD router stand-in (vllm-router, sglang_router), speaking each one's real protocol.

- vLLM (toy proxy / vllm-router): the request goes to a prefill engine with ``max_tokens=1``,
  ``stream=false`` and ``kv_transfer_params={"do_remote_decode": true, ...}``; the prefill's
  answer carries the ``kv_transfer_params`` the decode engine needs to pull the KV; the router
  then sends the original request with those params to a decode engine and streams its answer.
- SGLang: the router adds ``bootstrap_host`` (the prefill URL's host), ``bootstrap_port`` and a
  random ``bootstrap_room`` and sends the request to a prefill and a decode engine at once; the
  decode engine waits for the KV through the bootstrap port; the client gets decode's stream.

Both stamp ``X-Pdlift-Request-Start`` so the engines' deadlines absorb the router's hops.

Whatever the client's ``max_tokens``, 1 included, the request goes through prefill *and* decode,
so the KV is always transferred: vLLM's toy proxy sends the original request to decode after the
1-token prefill call unconditionally (``tests/v1/kv_connector/nixl_integration/toy_proxy_server.py``,
``_handle_completions``), and SGLang's router sends every request to both at once. No router
source found answers a 1-token request from prefill alone, so none is modelled here; pdlift's
TTFT probes ask for at least 2 tokens anyway and check the transfers in the engines' metrics.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import signal
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web

from sandbox.engines.cli_router import RouterConfig
from sandbox.engines.metrics import Registry
from sandbox.engines.settings import bind_address, resolve_host
from sandbox.engines.state import log


@dataclass
class Worker:
    url: str  # as configured (may be a Service name)
    kind: str  # "prefill" | "decode" | "regular"
    bootstrap_port: int | None = None
    healthy: bool = False
    inflight: int = 0

    def base(self) -> str:
        parts = urlsplit(self.url if "://" in self.url else "http://" + self.url)
        return f"{parts.scheme}://{resolve_host(parts.hostname or '')}:{parts.port or 80}"

    @property
    def host(self) -> str:
        return urlsplit(self.url if "://" in self.url else "http://" + self.url).hostname or ""


def _expand(url: str, dp: int) -> list[str]:
    if dp <= 1:
        return [url]
    parts = urlsplit(url)
    return [f"{parts.scheme}://{parts.hostname}:{(parts.port or 80) + i}" for i in range(dp)]


class Router:
    def __init__(self, cfg: RouterConfig, session: aiohttp.ClientSession):
        self.cfg, self.session = cfg, session
        self.workers = [Worker(u, "prefill", port) for url, port in cfg.prefill for u in _expand(url, cfg.dp_size)]
        self.workers += [Worker(u, "decode") for url in cfg.decode for u in _expand(url, cfg.dp_size)]
        self.workers += [Worker(u, "regular") for u in cfg.workers]
        self._rr = {kind: itertools.count() for kind in ("prefill", "decode", "regular")}
        self.metrics = Registry()
        self.metrics.counter("pdlift_sandbox_router_requests_total", "Requests routed, by route and status.")

    async def health_loop(self) -> None:
        while True:
            await asyncio.gather(*(self._check(w) for w in self.workers))
            await asyncio.sleep(self.cfg.health_interval_s)

    async def _check(self, worker: Worker) -> None:
        was = worker.healthy
        try:
            async with self.session.get(worker.base() + "/health", timeout=aiohttp.ClientTimeout(total=2)) as r:
                worker.healthy = r.status == 200
        except (aiohttp.ClientError, asyncio.TimeoutError, LookupError, OSError):
            worker.healthy = False
        if worker.healthy != was:
            log(f"worker {worker.url} ({worker.kind}) is {'healthy' if worker.healthy else 'unhealthy'}")

    def pick(self, kind: str) -> Worker | None:
        pool = [w for w in self.workers if w.kind == kind and w.healthy]
        if not pool:
            return None
        policy = self.cfg.prefill_policy if kind == "prefill" else self.cfg.decode_policy
        if policy == "random":
            return random.choice(pool)
        if policy in ("power_of_two", "cache_aware") and len(pool) > 1:
            return min(random.sample(pool, 2), key=lambda w: w.inflight)
        return pool[next(self._rr[kind]) % len(pool)]

    # --- HTTP -----------------------------------------------------------------------------

    def ready(self) -> bool:
        if self.cfg.pd:
            return self.pick("prefill") is not None and self.pick("decode") is not None
        return self.pick("regular") is not None

    async def readiness(self, _request: web.Request) -> web.Response:
        return web.json_response({"ready": self.ready()}, status=200 if self.ready() else 503)

    async def list_workers(self, _request: web.Request) -> web.Response:
        items = [{"url": w.url, "worker_type": w.kind, "is_healthy": w.healthy,
                  "bootstrap_port": w.bootstrap_port, "load": w.inflight} for w in self.workers]
        return web.json_response({"workers": items, "total": len(items)})

    async def forward_get(self, request: web.Request) -> web.Response:
        worker = self.pick("decode" if self.cfg.pd else "regular")
        if worker is None:
            return _error(503, "no healthy worker")
        async with self.session.request(request.method, worker.base() + request.path,
                                        data=await request.read(), headers=_ctype(request)) as r:
            return web.Response(status=r.status, body=await r.read(), content_type=r.content_type)

    async def generate(self, request: web.Request) -> web.StreamResponse:
        stamp = {"X-Pdlift-Request-Start": repr(time.time())}
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "request body is not valid JSON")
        if not self.cfg.pd:
            worker = self.pick("regular")
            if worker is None:
                return _error(503, "no healthy worker")
            return await self._relay(request, worker, body, stamp)
        prefill, decode = self.pick("prefill"), self.pick("decode")
        if prefill is None or decode is None:
            return _error(503, "no healthy prefill or decode worker")
        if self.cfg.flavour == "sglang":
            return await self._sglang(request, prefill, decode, body, stamp)
        return await self._vllm(request, prefill, decode, body, stamp)

    async def _vllm(self, request, prefill: Worker, decode: Worker, body: dict, stamp: dict) -> web.StreamResponse:
        p_body = {k: v for k, v in body.items() if k not in ("stream_options", "min_tokens")}
        p_body.update(stream=False, max_tokens=1, kv_transfer_params={
            "do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
            "remote_block_ids": None, "remote_host": None, "remote_port": None})
        if "max_completion_tokens" in p_body:
            p_body["max_completion_tokens"] = 1
        prefill.inflight += 1
        try:
            async with self.session.post(prefill.base() + request.path, json=p_body, headers=stamp) as r:
                answer = await r.json(content_type=None)
                if r.status != 200:
                    return web.json_response(answer, status=r.status)
        except (aiohttp.ClientError, LookupError) as e:
            return _error(502, f"prefill {prefill.url} failed: {e}")
        finally:
            prefill.inflight -= 1
        params = dict(answer.get("kv_transfer_params") or {})
        if prefill.bootstrap_port and not params.get("remote_port"):
            params["remote_port"] = prefill.bootstrap_port
        return await self._relay(request, decode, {**body, "kv_transfer_params": params}, stamp)

    async def _sglang(self, request, prefill: Worker, decode: Worker, body: dict, stamp: dict) -> web.StreamResponse:
        room = random.getrandbits(63)
        pd_body = {**body, "bootstrap_host": prefill.host, "bootstrap_port": prefill.bootstrap_port or 8998,
                   "bootstrap_room": room}
        p_task = asyncio.create_task(self._post_json(prefill, request.path, {**pd_body, "stream": False}, stamp))
        d_task = asyncio.create_task(self._relay(request, decode, pd_body, stamp, prepared=p_task))
        try:
            return await d_task
        finally:
            if not p_task.done():
                p_task.cancel()

    async def _post_json(self, worker: Worker, path: str, body: dict, stamp: dict) -> tuple[int, object]:
        worker.inflight += 1
        try:
            async with self.session.post(worker.base() + path, json=body, headers=stamp) as r:
                return r.status, await r.json(content_type=None)
        except (aiohttp.ClientError, LookupError, ValueError) as e:
            return 502, {"object": "error", "message": f"{worker.url} failed: {e}", "code": 502}
        finally:
            worker.inflight -= 1

    async def _relay(self, request: web.Request, worker: Worker, body: dict, stamp: dict,
                     prepared: asyncio.Task | None = None) -> web.StreamResponse:
        """Send ``body`` to ``worker`` and pass its answer through; a failed ``prepared`` wins."""
        worker.inflight += 1
        try:
            call = asyncio.ensure_future(self.session.post(worker.base() + request.path, json=body, headers=stamp))
            if prepared is not None:
                await asyncio.wait({call, prepared}, return_when=asyncio.FIRST_COMPLETED)
                if prepared.done() and prepared.result()[0] != 200:
                    call.cancel()
                    if call.done() and not call.cancelled() and call.exception() is None:
                        call.result().release()
                    status, answer = prepared.result()
                    self.metrics.inc("pdlift_sandbox_router_requests_total", route=request.path, status=str(status))
                    return web.json_response(answer, status=status)
            async with await call as upstream:
                self.metrics.inc("pdlift_sandbox_router_requests_total", route=request.path,
                                 status=str(upstream.status))
                resp = web.StreamResponse(status=upstream.status, headers=_ctype(upstream))
                await resp.prepare(request)
                async for chunk in upstream.content.iter_any():
                    await resp.write(chunk)
                await resp.write_eof()
                return resp
        except (aiohttp.ClientError, LookupError) as e:
            return _error(502, f"{worker.kind} {worker.url} failed: {e}")
        finally:
            worker.inflight -= 1


def _ctype(message) -> dict[str, str]:
    ctype = message.headers.get("Content-Type")
    return {"Content-Type": ctype} if ctype else {}


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"object": "error", "message": message, "type": "RouterError", "code": status},
                             status=status)


async def serve(cfg: RouterConfig) -> int:
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                    timeout=aiohttp.ClientTimeout(total=None, sock_connect=5))
    router = Router(cfg, session)
    app = web.Application(client_max_size=64 * 1024 * 1024)
    ok = lambda _r: web.Response(text="OK")  # noqa: E731 - liveness: the process answers
    app.router.add_get("/health", ok)
    app.router.add_get("/liveness", ok)
    app.router.add_get("/readiness", router.readiness)
    app.router.add_get("/workers", router.list_workers)
    app.router.add_get("/list_workers", router.list_workers)
    app.router.add_get("/v1/models", router.forward_get)
    app.router.add_post("/tokenize", router.forward_get)
    app.router.add_get("/metrics", lambda _r: web.Response(text=router.metrics.render(), content_type="text/plain"))
    app.router.add_post("/v1/completions", router.generate)
    app.router.add_post("/v1/chat/completions", router.generate)
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
    await runner.setup()
    try:
        await web.TCPSite(runner, bind_address(), cfg.port).start()
    except OSError as e:
        log(f"cannot start the router: {e}", "ERROR")
        await session.close()
        return 1
    log(f"{cfg.flavour} router listening on http://{bind_address()}:{cfg.port} "
        f"({'PD' if cfg.pd else 'regular'} mode, {len(router.workers)} workers)")
    health = asyncio.create_task(router.health_loop())
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await stop.wait()
    health.cancel()
    await runner.cleanup()
    await session.close()
    return 0
