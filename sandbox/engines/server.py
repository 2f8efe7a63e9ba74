"""Run one engine process (vLLM or SGLang stand-in) until SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import sys
import time

import aiohttp
from aiohttp import web

from sandbox.engines import api, group
from sandbox.engines.config import EngineConfig
from sandbox.engines.gpu_activity import Activity, publish
from sandbox.engines.kv import KvProducer
from sandbox.engines.settings import Settings, bind_address, identity
from sandbox.engines.state import EngineState, KvCounters, log, node_efa_devices


def run_engine(cfg: EngineConfig) -> int:
    settings = Settings(identity(cfg.engine, cfg.role, cfg.port))
    crash = settings.faults.crash_at_start
    if crash:
        message = crash if isinstance(crash, str) else "engine failed to start (injected fault)"
        print(f"RuntimeError: {message}", file=sys.stderr, flush=True)
        return 1
    failure = cfg.kv.start_failure(cfg.env, settings.faults.tcp_fallback) if cfg.kv else None
    if failure:
        print(f"RuntimeError: {failure}", file=sys.stderr, flush=True)
        return 1
    return asyncio.run(_serve(cfg, settings))


def _startup_log(cfg: EngineConfig, protocol: str | None) -> None:
    if cfg.engine == "vllm":
        log(f"vLLM API server version {api.VLLM_VERSION}")
        log(f"model={cfg.model} tp={cfg.tp} pp={cfg.pp} dp={cfg.dp} kv_cache_dtype={cfg.kv_cache_dtype} "
            f"block_size={cfg.block_size} role={cfg.role}")
    else:
        log(f"server_args: model_path={cfg.model} tp_size={cfg.tp} pp_size={cfg.pp} dp_size={cfg.dp} "
            f"disaggregation_mode={cfg.role} kv_cache_dtype={cfg.kv_cache_dtype} page_size={cfg.block_size}")
    if cfg.kv and protocol:
        devices = node_efa_devices()
        for line in cfg.kv.startup_lines(protocol, cfg.env, devices):
            if line.startswith("I") and "] " in line:
                print(line, file=sys.stderr, flush=True)  # the C++ libraries log to stderr
            else:
                log(line)
    if not cfg.serves_api:
        log(f"Running in headless mode: node rank {cfg.group_rank} of {cfg.group_size} serves no API")


async def _site(runners: list[web.AppRunner], app: web.Application, port: int) -> None:
    # Draining is done before cleanup (see --shutdown-timeout), so cleanup itself need not wait.
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
    await runner.setup()
    await web.TCPSite(runner, bind_address(), port).start()
    runners.append(runner)


async def _stats_logger(states: list[EngineState], interval: float) -> None:
    """vLLM's periodic stats line, including the external (KV connector) prefix cache hit rate."""
    last: dict[int, tuple[float, float]] = {}
    while True:
        await asyncio.sleep(interval)
        for s in states:
            p = s.prefix
            prompt, gen = s.metrics.value(p + "prompt_tokens_total"), s.metrics.value(p + "generation_tokens_total")
            before = last.get(s.port, (0.0, 0.0))
            last[s.port] = (prompt, gen)
            if (prompt, gen) == before and not s.running:
                continue
            queries = s.metrics.value(p + "external_prefix_cache_queries_total")
            hits = s.metrics.value(p + "external_prefix_cache_hits_total")
            rate = 100.0 * hits / queries if queries else 0.0
            log(f"Engine {s.rank:03d}: Avg prompt throughput: {(prompt - before[0]) / interval:.1f} tokens/s, "
                f"Avg generation throughput: {(gen - before[1]) / interval:.1f} tokens/s, Running: {s.running} "
                f"reqs, Waiting: {s.waiting} reqs, External prefix cache hit rate: {rate:.1f}%")


async def _announce_ready(cfg: EngineConfig, states: list[EngineState]) -> None:
    while not all(s.ready() for s in states):
        await asyncio.sleep(0.05)
    where = ", ".join(f"http://{bind_address()}:{s.port}" for s in states) if cfg.serves_api else "no API"
    log(f"Application startup complete ({where})")


async def _serve(cfg: EngineConfig, settings: Settings) -> int:
    protocol = cfg.kv.resolve(cfg.env, settings.faults.tcp_fallback) if cfg.kv else None
    _startup_log(cfg, protocol)
    counters = KvCounters(cfg, protocol or "none")
    ports = cfg.api_ports or [cfg.port]
    activity = Activity()
    states = [EngineState(cfg, settings, counters, rank, port, activity) for rank, port in enumerate(ports)]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                    timeout=aiohttp.ClientTimeout(total=None, sock_connect=5))
    runners: list[web.AppRunner] = []
    producer = KvProducer(cfg, settings, counters) if cfg.kv and cfg.bootstrap_port and cfg.is_leader else None
    tasks = []
    try:
        events = [s.group_ready for s in states]
        if cfg.is_leader:
            await group.Leader(cfg, events).start()
        else:
            tasks.append(asyncio.create_task(group.join(cfg, events)))
        if producer:
            await _site(runners, producer.app(), cfg.bootstrap_port)
        if cfg.serves_api:
            for s in states:
                await _site(runners, api.engine_app(s, producer, session), s.port)
        elif cfg.health_only_port:
            await _site(runners, api.health_only_app(states), cfg.port)
        if cfg.supervisor_port:
            await _site(runners, api.health_only_app(states), cfg.supervisor_port)
    except OSError as e:
        log(f"cannot start the server: {e}", "ERROR")
        await session.close()
        return 1
    listening = time.monotonic()
    for s in states:
        s.listening_since = listening
    interval = float(cfg.env.get("VLLM_LOG_STATS_INTERVAL") or 10)
    tasks += [asyncio.create_task(_stats_logger(states, interval)), asyncio.create_task(_announce_ready(cfg, states)),
              asyncio.create_task(publish(activity))]
    await stop.wait()
    log("Shutting down")
    for s in states:
        s.draining = True  # new requests and readiness probes get 503 from here on
    deadline = time.monotonic() + cfg.shutdown_timeout_s
    while any(s.running for s in states) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)  # --shutdown-timeout: drain in-flight requests
    for task in tasks:
        task.cancel()
    for runner in runners:
        await runner.cleanup()
    await session.close()
    return 0
