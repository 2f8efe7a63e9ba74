"""`mooncake_master` (Mooncake Store master): gflags command line, a listener and metrics.

Serves on --port (the real master speaks coro_rpc there; here it answers TCP probes and
``GET /health``), Prometheus text on --metrics_port when --enable_metric_reporting (default on),
and the HTTP metadata store (``GET/PUT/DELETE /metadata?key=K``) on --http_metadata_server_port
when --enable_http_metadata_server. Unknown flags exit 1 with gflags' message.
"""

from __future__ import annotations

import asyncio
import signal
import sys

from aiohttp import web

from sandbox.engines.settings import bind_address
from sandbox.engines.state import log

FLAGS: dict[str, tuple[type, object]] = {
    "port": (int, 50051), "rpc_port": (int, 0), "rpc_address": (str, ""), "rpc_thread_num": (int, 4),
    "max_threads": (int, 4), "rpc_conn_timeout_seconds": (int, 0), "rpc_enable_tcp_no_delay": (bool, True),
    "enable_gc": (bool, False), "enable_metric_reporting": (bool, True), "metrics_port": (int, 9003),
    "default_kv_lease_ttl": (int, 5000), "default_kv_soft_pin_ttl": (int, 1800000),
    "allow_evict_soft_pinned_objects": (bool, True), "eviction_ratio": (float, 0.05),
    "eviction_high_watermark_ratio": (float, 0.95), "enable_ha": (bool, False), "etcd_endpoints": (str, ""),
    "cluster_id": (str, "mooncake_cluster"), "client_ttl": (int, 10), "root_fs_dir": (str, ""),
    "memory_allocator": (str, "offset"), "enable_http_metadata_server": (bool, False),
    "http_metadata_server_port": (int, 8080), "http_metadata_server_host": (str, "0.0.0.0"),
    "config_path": (str, ""), "v": (int, 0), "logtostderr": (bool, False), "alsologtostderr": (bool, False),
}


class FlagError(Exception):
    pass


def _convert(name: str, kind: type, text: str) -> object:
    if kind is bool:
        if text.lower() in ("true", "1", "yes", "t", "y"):
            return True
        if text.lower() in ("false", "0", "no", "f", "n"):
            return False
        raise FlagError(f"illegal value '{text}' specified for bool flag '{name}'")
    try:
        return kind(text)
    except ValueError as e:
        raise FlagError(f"illegal value '{text}' specified for {kind.__name__} flag '{name}'") from e


def parse(argv: list[str]) -> dict[str, object]:
    """gflags syntax: --flag=value, --flag value, -flag, --flag / --noflag for booleans."""
    values = {name: default for name, (_kind, default) in FLAGS.items()}
    args = list(argv)
    while args:
        arg = args.pop(0)
        if not arg.startswith("-"):
            continue  # gflags leaves positional arguments to the program, which ignores them
        name, has_value, value = arg.lstrip("-").partition("=")
        if name not in FLAGS and name.startswith("no") and FLAGS.get(name[2:], (None,))[0] is bool:
            values[name[2:]] = False
            continue
        if name not in FLAGS:
            raise FlagError(f"unknown command line flag '{name}'")
        kind = FLAGS[name][0]
        if not has_value:
            if kind is bool:
                values[name] = True
                continue
            if not args:
                raise FlagError(f"flag '{arg}' is missing its argument")
            value = args.pop(0)
        values[name] = _convert(name, kind, value)
    return values


async def serve(flags: dict[str, object]) -> int:
    store: dict[str, bytes] = {}
    runners: list[web.AppRunner] = []

    async def metadata(request: web.Request) -> web.Response:
        key = request.query.get("key", "")
        if request.method == "PUT":
            store[key] = await request.read()
            return web.Response(text="metadata updated")
        if request.method == "DELETE":
            return web.Response(text="deleted") if store.pop(key, None) is not None else web.Response(status=404)
        return web.Response(body=store[key]) if key in store else web.Response(status=404, text="metadata not found")

    main = web.Application()
    main.router.add_get("/health", lambda _r: web.Response(text="OK"))
    apps = [(main, int(flags["port"]))]
    if flags["enable_metric_reporting"]:
        metrics = web.Application()
        text = ("# HELP master_key_count Keys in the store.\n# TYPE master_key_count gauge\n"
                "master_key_count {}\n")
        metrics.router.add_get("/metrics", lambda _r: web.Response(text=text.format(len(store))))
        apps.append((metrics, int(flags["metrics_port"])))
    if flags["enable_http_metadata_server"]:
        meta = web.Application()
        meta.router.add_route("*", "/metadata", metadata)
        apps.append((meta, int(flags["http_metadata_server_port"])))
    try:
        for app, port in apps:
            runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
            await runner.setup()
            await web.TCPSite(runner, bind_address(), port).start()
            runners.append(runner)
    except OSError as e:
        log(f"Failed to start master service: {e}", "ERROR")
        return 1
    log(f"Master service started on port {flags['port']}, max_threads={flags['max_threads']}, "
        f"enable_gc={str(flags['enable_gc']).lower()}, metrics_port={flags['metrics_port']}")
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await stop.wait()
    for runner in runners:
        await runner.cleanup()
    return 0


def main(argv: list[str]) -> int:
    try:
        flags = parse(argv)
    except FlagError as e:
        print(f"ERROR: {e}", file=sys.stderr, flush=True)
        return 1
    return asyncio.run(serve(flags))
