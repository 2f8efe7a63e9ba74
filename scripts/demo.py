"""The README's main job: the whole migration against the local sandbox, through Prefect.

Starts a local Prefect server (SQLite, 127.0.0.1) and the sandbox, deploys prefect.yaml, starts a
process worker, triggers `migrate` on the sandbox blueprint through the REST API, follows it to
the end and prints the summary and where to look in the UI. `--down` stops everything it started.
Everything it starts is recorded by PID under .pdlift/demo/ and nothing else is ever signalled.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STATE = Path(os.environ.get("PDLIFT_STATE_DIR") or REPO / ".pdlift")
DEMO = STATE / "demo"
PY = Path(sys.executable)
BIN = PY.parent
PORT = int(os.environ.get("PDLIFT_PREFECT_PORT", "4200"))
API = f"http://127.0.0.1:{PORT}/api"
UI = f"http://127.0.0.1:{PORT}"
TERMINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def base_env() -> dict[str, str]:
    env = {**os.environ, "DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "PREFECT_HOME": str(DEMO / "prefect-home"), "PREFECT_API_URL": API,
           "PREFECT_SERVER_API_HOST": "127.0.0.1", "PREFECT_SERVER_API_PORT": str(PORT),
           "PREFECT_UI_API_URL": API, "PREFECT_WORKER_QUERY_SECONDS": "1",
           "PREFECT_CLI_PROMPT": "false", "PDLIFT_REPO": str(REPO), "PDLIFT_STATE_DIR": str(STATE),
           "PYTHONPATH": str(REPO)}
    env_file = STATE / "sandbox.env"
    if env_file.exists():
        for line in env_file.read_text().splitlines():
            if line.startswith("export ") and "=" in line:
                key, value = line[len("export "):].split("=", 1)
                env[key] = value.strip().strip("'\"")
    return env


RETRY_STATUS = (502, 503, 504)  # SQLite busy right after `prefect deploy` answers 503; Prefect's own client retries too


def http(method: str, path: str, body: dict | None = None, timeout: float = 10.0, attempts: int = 8):
    data = None if body is None else json.dumps(body).encode()
    for attempt in range(attempts):
        req = urllib.request.Request(API + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with NO_PROXY.open(req, timeout=timeout) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as e:
            if e.code not in RETRY_STATUS or attempt == attempts - 1:
                raise
            time.sleep(min(0.5 * 2 ** attempt, 5.0))


def wait_for(check, what: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (OSError, urllib.error.URLError, ValueError):
            pass
        time.sleep(0.5)
    sys.exit(f"demo: {what} did not come up within {timeout_s:.0f}s (logs: {DEMO})")


def start(name: str, argv: list[str], env: dict[str, str]) -> int:
    DEMO.mkdir(parents=True, exist_ok=True)
    pid_file = DEMO / f"{name}.pid"
    if pid_file.exists() and _alive(int(pid_file.read_text())):
        return int(pid_file.read_text())
    log = open(DEMO / f"{name}.log", "ab")
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
                            start_new_session=True)
    pid_file.write_text(str(proc.pid))
    return proc.pid


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def stop(name: str) -> None:
    pid_file = DEMO / f"{name}.pid"
    if not pid_file.exists():
        return
    pid = int(pid_file.read_text())
    # A Prefect worker wants SIGTERM, then SIGINT; then the group is killed if still there.
    for sig, grace in ((signal.SIGTERM, 10), (signal.SIGINT, 5), (signal.SIGKILL, 2)):
        if not _alive(pid):
            break
        try:
            os.killpg(pid, sig)
        except OSError:
            break
        deadline = time.monotonic() + grace
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
    pid_file.unlink(missing_ok=True)
    print(f"demo: stopped {name} (pid {pid})")


def run(cmd: list[str], env: dict[str, str]) -> None:
    subprocess.run(cmd, env=env, cwd=REPO, check=True)


def up(postgres: bool = False) -> dict[str, str]:
    run([str(REPO / "scripts" / "sandbox"), "up"], {**os.environ, "PDLIFT_STATE_DIR": str(STATE)})
    env = base_env()
    if postgres:  # production's shape: the server on PostgreSQL, run state in S3
        import demo_postgres

        url, seconds = demo_postgres.start(DEMO, REPO, int(os.environ.get("PDLIFT_PG_PORT", "55432")))
        env["PREFECT_API_DATABASE_CONNECTION_URL"] = url
        env["PDLIFT_STATE_URI"] = demo_postgres.state_uri(env)
        print(f"demo: PostgreSQL up in {seconds:.1f} s ({url}); run state in {env['PDLIFT_STATE_URI']}")
    started = time.monotonic()
    start("prefect-server", [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(PORT),
                             "--analytics-off"], env)
    wait_for(lambda: http("GET", "/health") is True, f"Prefect server on {UI}", 400 if postgres else 90)
    print(f"demo: Prefect server healthy after {time.monotonic() - started:.1f} s")
    subprocess.run([str(BIN / "prefect"), "work-pool", "create", "pdlift", "--type", "process"], env=env,
                   cwd=REPO, capture_output=True)
    run([str(BIN / "prefect"), "--no-prompt", "deploy", "--all"], env)
    start("worker", [str(BIN / "prefect"), "worker", "start", "--pool", "pdlift", "--type", "process"], env)
    return env


def trigger(blueprint: str, flow: str = "migrate", strategy: str = "auto") -> str:
    """Start a run of the ``migrate`` deployment, or of ``redeploy`` (what its weekly schedule
    starts: the demo's own fleet, the strategy ``auto`` picks unless one is named) over REST."""
    dep = http("GET", f"/deployments/name/{flow}/{flow}")
    name = f"demo-{flow}-{int(time.time())}"
    parameters = {"params": {"blueprint": blueprint}} if flow == "migrate" else {"blueprint": blueprint,
                                                                                  "strategy": strategy}
    # the idempotency key makes a retried POST (after a 503) give the same run, not a second one
    body = {"parameters": parameters, "name": name, "tags": ["pdlift-demo"], "idempotency_key": name}
    return http("POST", f"/deployments/{dep['id']}/create_flow_run", body)["id"]


def follow(flow_run_id: str, timeout_s: float) -> dict:
    seen, deadline = set(), time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        fr = http("GET", f"/flow_runs/{flow_run_id}")
        for line in _new_log_lines(flow_run_id, seen):
            print(f"  {line}")
        if fr["state_type"] in TERMINAL:
            return fr
        time.sleep(2)
    sys.exit(f"demo: the run did not finish within {timeout_s:.0f}s; see {UI}/runs/flow-run/{flow_run_id}")


def _new_log_lines(flow_run_id: str, seen: set) -> list[str]:
    logs = http("POST", "/logs/filter", {"logs": {"flow_run_id": {"any_": [flow_run_id]}}, "sort": "TIMESTAMP_ASC",
                                          "limit": 200})
    out = []
    for entry in logs:
        if entry["id"] not in seen:
            seen.add(entry["id"])
            if entry["level"] >= 20:
                out.append(entry["message"].splitlines()[0][:200])  # first line: no tracebacks here
    return out


def summary(flow_run_id: str, fr: dict) -> None:
    arts = http("POST", "/artifacts/filter", {"artifacts": {"key": {"like_": "migration-"}}, "sort": "CREATED_DESC",
                                              "limit": 1})
    print(f"\n== migrate finished: {fr['state_name']} ==")
    if arts:
        print(arts[0]["data"])
    print(f"Prefect UI: {UI}/runs/flow-run/{flow_run_id}  (artifacts: {UI}/artifacts)")
    print("Stop everything: scripts/demo --down")


def down() -> None:
    import demo_postgres

    stop("worker")
    stop("prefect-server")
    demo_postgres.stop(DEMO)
    subprocess.run([str(REPO / "scripts" / "sandbox"), "down"], env={**os.environ, "PDLIFT_STATE_DIR": str(STATE)},
                   cwd=REPO)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--down", action="store_true", help="stop the worker, the Prefect server and the sandbox")
    parser.add_argument("--blueprint", default="blueprints/sandbox-2p2d.yaml")
    parser.add_argument("--postgres", action="store_true",
                        help="the Prefect server on PostgreSQL (Debian's, on 127.0.0.1) and run state in the "
                             "sandbox's S3 (PDLIFT_STATE_URI), as in production")
    parser.add_argument("--redeploy", action="store_true",
                        help="on the running demo: start the scheduled `redeploy` deployment now over REST and "
                             "follow it (the 4-node fleet has no room for a second colour: recreate)")
    parser.add_argument("--strategy", default="auto", choices=["auto", "blue-green", "rolling", "recreate", "fleet"],
                        help="with --redeploy: the strategy (fleet: a second 4-node fleet, then the first released)")
    parser.add_argument("--timeout", type=float, default=1800)
    args = parser.parse_args()
    if args.down:
        down()
        return 0
    if args.redeploy:
        flow_run_id = trigger(args.blueprint, "redeploy", args.strategy)
        print(f"demo: redeploy started: {UI}/runs/flow-run/{flow_run_id}")
        fr = follow(flow_run_id, args.timeout)
        print(f"\n== redeploy finished: {fr['state_name']} ==")
        print(f"Prefect UI: {UI}/runs/flow-run/{flow_run_id}  (the strategy-* artifact says why that strategy)")
        return 0 if fr["state_type"] == "COMPLETED" else 1
    up(args.postgres)
    flow_run_id = trigger(args.blueprint)
    print(f"demo: migrate started: {UI}/runs/flow-run/{flow_run_id}")
    fr = follow(flow_run_id, args.timeout)
    summary(flow_run_id, fr)
    return 0 if fr["state_type"] == "COMPLETED" else 1


if __name__ == "__main__":
    sys.exit(main())
