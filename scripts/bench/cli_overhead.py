#!/usr/bin/env python3
"""Benchmark: the fixed overhead of one `pdlift` command that runs a flow, with and without a
Prefect server to talk to.

The command timed is `pdlift plan-flow BLUEPRINT` (the sandbox blueprint by default): a trivial
flow (read the blueprint, plan, publish a markdown artifact) that touches nothing else, so its wall
time is the CLI's fixed cost: the interpreter, the imports, reaching a Prefect API, a flow run.

* ``ephemeral``: PREFECT_API_URL unset, each command starts Prefect's temporary server (what every
  stage command did before; still what happens without PREFECT_API_URL).
* ``server``: PREFECT_API_URL set to a `prefect server start --host 127.0.0.1 --port <free>` this
  script starts itself (temporary PREFECT_HOME, UI and analytics off) and stops at the end.

Each mode gets one untimed warm-up run first (a new database is migrated, the flow registered),
then ``--runs`` timed ones; the floor is `pdlift plan` (the same work without Prefect). Every
process is bounded, all traffic stays on 127.0.0.1. The last line is

    cli overhead: ephemeral=<s>s server=<s>s ratio=<x>

    .venv/bin/python scripts/bench/cli_overhead.py [--runs 3] [--blueprint FILE] [--json FILE]

The peer is pdlift's own other path (Prefect's temporary server): nothing to install beyond
``scripts/setup``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts" / "bench"))

import peers  # noqa: E402  (standard library only)

if __name__ == "__main__":
    peers.run_in_repo_venv(__file__)

NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))

from sandbox.orchestrator.procs import stop_child  # noqa: E402
from sandbox.s3 import free_port  # noqa: E402


def base_env(home: Path, state: Path) -> dict[str, str]:
    """This environment without any Prefect setting, plus a private PREFECT_HOME; loopback never proxied."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    no_proxy = ",".join(x for x in (env.get("NO_PROXY") or env.get("no_proxy"), "127.0.0.1", "localhost") if x)
    env.update(DO_NOT_TRACK="1", PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_HOME=str(home),
               PDLIFT_STATE_DIR=str(state), NO_PROXY=no_proxy, no_proxy=no_proxy)
    return env


def timed(argv: list[str], env: dict[str, str], timeout_s: float) -> float:
    start = time.perf_counter()
    try:
        out = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as e:
        raise SystemExit(f"{' '.join(argv[2:])}: no result within {timeout_s:.0f} s") from e
    seconds = time.perf_counter() - start
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(argv[2:])} exited {out.returncode}:\n{out.stderr[-2000:]}")
    return seconds


def measure(name: str, argv: list[str], env: dict[str, str], runs: int, timeout_s: float) -> dict:
    warm = timed(argv, env, timeout_s)
    times = [timed(argv, env, timeout_s) for _ in range(runs)]
    result = {"mode": name, "warm_up_s": round(warm, 2), "runs_s": [round(t, 2) for t in times],
              "median_s": round(statistics.median(times), 2)}
    print(f"{name:<10} median {result['median_s']:6.2f} s  runs {result['runs_s']}  (warm-up {warm:.2f} s)",
          flush=True)
    return result


def wait_healthy(api: str, proc: subprocess.Popen, timeout_s: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if proc.poll() is not None:
            raise SystemExit(f"prefect server start exited {proc.returncode}")
        try:
            with NO_PROXY.open(api + "/health", timeout=2) as r:
                if r.status == 200:
                    return time.monotonic() - start
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.25)
    raise SystemExit(f"prefect server start: {api} did not answer within {timeout_s:.0f} s")


def stop(proc: subprocess.Popen) -> None:
    stop_child(proc, ((signal.SIGTERM, 15), (signal.SIGKILL, 5)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="timed runs per mode (after one warm-up)")
    parser.add_argument("--blueprint", default=str(ROOT / "blueprints" / "sandbox-2p2d.yaml"))
    parser.add_argument("--command-timeout", type=float, default=180, help="seconds one command may take")
    parser.add_argument("--server-timeout", type=float, default=180, help="seconds `prefect server start` may take")
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args(argv)

    flow_cmd = [sys.executable, "-m", "cli.main", "plan-flow", args.blueprint]
    floor_cmd = [sys.executable, "-m", "cli.main", "plan", args.blueprint]
    results: dict = {"command": "pdlift plan-flow " + os.path.relpath(args.blueprint, ROOT), "runs": args.runs,
                     "cpus": os.cpu_count(), "load_avg": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory(prefix="pdlift-cli-overhead-") as tmp:
        tmpdir = Path(tmp)
        env = base_env(tmpdir / "home-ephemeral", tmpdir / "state-ephemeral")
        results["floor"] = measure("floor", floor_cmd, env, args.runs, args.command_timeout)
        results["ephemeral"] = measure("ephemeral", flow_cmd, env, args.runs, args.command_timeout)

        server_env = base_env(tmpdir / "home-server", tmpdir / "state-server")
        port = free_port()
        api = f"http://127.0.0.1:{port}/api"
        proc = subprocess.Popen([str(Path(sys.executable).parent / "prefect"), "server", "start", "--host", "127.0.0.1",
                                 "--port", str(port)],
                                cwd=tmpdir, env={**server_env, "PREFECT_UI_ENABLED": "false"},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            started = wait_healthy(api, proc, args.server_timeout)
            print(f"server     started in {started:.1f} s at {api} (once, not per command)", flush=True)
            results["server_start_s"] = round(started, 2)
            results["server"] = measure("server", flow_cmd, {**server_env, "PREFECT_API_URL": api}, args.runs,
                                        args.command_timeout)
        finally:
            stop(proc)

    eph, srv = results["ephemeral"]["median_s"], results["server"]["median_s"]
    results["ratio"] = round(eph / srv, 2)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    print(f"cli overhead: ephemeral={eph:.2f}s server={srv:.2f}s ratio={results['ratio']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
