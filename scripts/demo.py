"""The README's main job: the whole migration against the local sandbox, through Prefect.

Installs what is missing, starts the sandbox and a local Prefect server (SQLite, 127.0.0.1), deploys
prefect.yaml, starts a process worker, triggers `migrate` on the sandbox blueprint through the
REST API, follows it to the end and prints the summary and where to look in the UI. It prints a
short header, one line per step and per stage; every tool's own output and the run's log go to
<state>/demo/demo.log (`--verbose` shows them here too). `--down` stops everything it started.
Everything it starts is recorded by PID under .pdlift/demo/ and nothing else is ever signalled.
Runs on the system's Python (3.11+): it installs .venv itself.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import demo_view

REPO = Path(__file__).resolve().parents[1]
STATE = Path(os.environ.get("PDLIFT_STATE_DIR") or REPO / ".pdlift").resolve()
DEMO = STATE / "demo"
LOG = DEMO / "demo.log"
BIN = REPO / ".venv" / "bin"
PORT = int(os.environ.get("PDLIFT_PREFECT_PORT", "4200"))
API = f"http://127.0.0.1:{PORT}/api"
UI = f"http://127.0.0.1:{PORT}"
TERMINAL = demo_view.TERMINAL
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
VERBOSE = False
TAIL_LINES = 20  # of the log, when a step fails
NOTIFICATIONS = DEMO / "notifications.jsonl"  # what the automations sent to the demo's loopback webhook
ENV_FILE = DEMO / "demo.env"  # what a shell needs to run pdlift against the demo (`set -a; . demo.env`)
SET_UP = "PDLIFT_DEMO_SET_UP"
PREFECT_ECHOES = ("Finished in state ", "Encountered exception during execution", "Engine execution exited")  # set when .venv's Python re-runs the demo after the setup


def base_env() -> dict[str, str]:
    env = {**os.environ, "DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "PREFECT_HOME": str(DEMO / "prefect-home"), "PREFECT_API_URL": API,
           "PREFECT_SERVER_API_HOST": "127.0.0.1", "PREFECT_SERVER_API_PORT": str(PORT),
           "PREFECT_UI_API_URL": API, "PREFECT_WORKER_QUERY_SECONDS": "1",
           "PREFECT_CLI_PROMPT": "false", "PDLIFT_REPO": str(REPO), "PDLIFT_STATE_DIR": str(STATE),
           "PYTHONPATH": str(REPO)}
    return {**env, **_sandbox_env()}


def _sandbox_env() -> dict[str, str]:
    env_file, env = STATE / "sandbox.env", {}
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
        except (TimeoutError, ConnectionError, urllib.error.URLError):
            # A server too busy to answer within the timeout (SQLite under a loaded machine: a poll
            # of the run took over 10 s and ended the demo with a traceback while its run went on) or
            # one dropping a connection. Every call here reads, but the one that creates the run,
            # and that one carries an idempotency key: each is safe to send again.
            if attempt == attempts - 1:
                raise
        time.sleep(min(0.5 * 2 ** attempt, 5.0))


def wait_for(check, what: str, timeout_s: float, log: Path = LOG) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (OSError, urllib.error.URLError, ValueError):
            pass
        time.sleep(0.5)
    fail(f"{what} did not come up within {timeout_s:.0f} s", log)


def say(text: str = "") -> None:
    print(text, flush=True)
    note(text)


def note(text: str) -> None:
    """A line for the log only (shown too with --verbose)."""
    DEMO.mkdir(parents=True, exist_ok=True)
    with open(LOG, "a") as log:
        log.write(text + "\n")
    if VERBOSE:
        print(f"    | {text}", flush=True)


def fail(why: str, log: Path = LOG) -> None:
    """The failing step's last lines (from its own log: a component's, else the demo's), and where the rest is."""
    lines = log.read_text(errors="replace").splitlines()[-TAIL_LINES:] if log.exists() else []
    print("\n".join(f"    | {line}" for line in lines), file=sys.stderr)
    sys.exit(f"demo: {why}" + (f"\n  its log: {log}" if log != LOG else "") + f"\n  full log: {LOG}")


STEP_TIMEOUT_S = 1200  # the setup installs packages on a fresh machine; nothing else comes near


def step(what: str, cmd: list[str], env: dict[str, str] | None = None, check: bool = True,
         timeout_s: float = STEP_TIMEOUT_S) -> float:
    """Run a tool with its output in the log; one line saying what and how long. A tool still
    running after ``timeout_s`` is stopped (its process group) and the step fails, naming it."""
    t0 = time.monotonic()
    note(f"$ {' '.join(cmd)}")
    with open(LOG, "ab") as log:
        proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
        watchdog = threading.Timer(timeout_s, _kill_group, (proc.pid,))
        watchdog.start()
        try:
            for chunk in proc.stdout:  # into the log always; on the terminal too with --verbose
                log.write(chunk)
                if VERBOSE:
                    sys.stdout.buffer.write(chunk)
                    sys.stdout.flush()
            proc.wait()
        except BaseException:  # Ctrl-C: its own session gets no SIGINT from the terminal, so stop it here
            _kill_group(proc.pid)
            raise
        finally:
            watchdog.cancel()
    if time.monotonic() - t0 >= timeout_s:
        fail(f"{what} did not finish within {timeout_s:.0f} s and was stopped: {' '.join(cmd)}")
    if check and proc.returncode != 0:
        fail(f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}")
    return time.monotonic() - t0


def _kill_group(pid: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)


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


def header(blueprint: str, postgres: bool) -> None:
    say(f"pdlift demo: the whole migration of {blueprint} against the local sandbox (AWS, EKS and GPU nodes "
        f"stood in for on 127.0.0.1)")
    say("  setup, sandbox, Prefect server" + (" on PostgreSQL" if postgres else "") + ", deployments and a "
        "worker; then the `migrate` deployment over REST: reserve, launch, fabric, weights, deploy, benchmark+gate")
    say(f"  Prefect UI: {UI}    tool output and the run's log: {LOG}" + ("" if VERBOSE else " (--verbose: here too)"))


def setup() -> None:
    """Install what is missing, then go on in .venv's Python (its boto3 and Prefect, whatever the
    system's Python has)."""
    seconds = step("setup", [str(REPO / "scripts" / "setup")])
    say(f"demo: setup (what was missing installed into .venv)   {seconds:6.1f} s")
    venv_python = BIN / "python"
    if Path(sys.executable).resolve() != venv_python.resolve():
        os.execve(venv_python, [str(venv_python), __file__, *sys.argv[1:]], {**os.environ, SET_UP: "1"})


def up(blueprint: str, postgres: bool = False, s3_state: bool | None = None) -> dict[str, str]:
    """Everything the run needs, started; the environment a worker and a shell of the operator's use.
    ``s3_state`` (default: with ``postgres``) keeps the run state in the sandbox's S3, as production does."""
    step("blueprint", [str(BIN / "pdlift"), "validate", blueprint])  # a bad one: one clear line, before anything starts
    # the blueprint's sandbox section: node addresses, SSH port, model size
    seconds = step("sandbox", [str(REPO / "scripts" / "sandbox"), "up", "--blueprint", blueprint],
                   {**os.environ, "PDLIFT_STATE_DIR": str(STATE)})
    say(f"demo: sandbox up (S3, AWS endpoint, Kubernetes API)    {seconds:6.1f} s")
    env = base_env()
    if postgres:  # production's shape: the server on PostgreSQL, run state in S3
        import demo_postgres

        url, seconds = demo_postgres.start(DEMO, REPO, int(os.environ.get("PDLIFT_PG_PORT", "55432")))
        env["PREFECT_API_DATABASE_CONNECTION_URL"] = url
        env["PDLIFT_STATE_URI"] = demo_postgres.state_uri(env)
        say(f"demo: PostgreSQL up ({url}); run state in {env['PDLIFT_STATE_URI']}   {seconds:6.1f} s")
    elif s3_state:
        import demo_postgres

        env["PDLIFT_STATE_URI"] = demo_postgres.state_uri(env)
    started = time.monotonic()
    start("prefect-server", [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(PORT),
                             "--analytics-off"], env)
    wait_for(lambda: http("GET", "/health") is True, f"the Prefect server on {UI}", 400 if postgres else 90,
             DEMO / "prefect-server.log")
    say(f"demo: Prefect server healthy on {UI}    {time.monotonic() - started:6.1f} s")
    started = time.monotonic()
    step("work pool", [str(BIN / "prefect"), "work-pool", "create", "pdlift", "--type", "process"], env, check=False)
    step("prefect deploy", [str(BIN / "prefect"), "--no-prompt", "deploy", "--all"], env)
    start("worker", [str(BIN / "prefect"), "worker", "start", "--pool", "pdlift", "--type", "process"], env)
    say(f"demo: prefect.yaml deployed, a worker on pool pdlift    {time.monotonic() - started:6.1f} s")
    started = time.monotonic()
    webhook = f"http://127.0.0.1:{webhook_port()}/pdlift"
    start("webhook", [sys.executable, str(REPO / "scripts" / "demo_webhook.py"), str(webhook_port()),
                      str(NOTIFICATIONS)], env)
    step("notify install", [str(BIN / "pdlift"), "notify", "install", "--api", API],
         {**env, "PDLIFT_NOTIFY_WEBHOOK": webhook})
    say(f"demo: notifications (gate FAIL/INCONCLUSIVE, failed runs billing, leaks) to {webhook}    "
        f"{time.monotonic() - started:6.1f} s")
    write_env_file(env)
    return env


def write_env_file(env: dict[str, str]) -> None:
    """The sandbox's environment, the Prefect API and the state store, for a shell of the operator's."""
    import shlex

    # The sandbox's own variables and the demo's, never whatever else the caller's shell carries.
    keys = set(_sandbox_env()) | {"PREFECT_API_URL", "PDLIFT_STATE_DIR", "PDLIFT_STATE_URI", "DO_NOT_TRACK"}
    ENV_FILE.write_text("".join(f"export {k}={shlex.quote(env[k])}\n" for k in sorted(keys) if k in env))


def webhook_port() -> int:
    """The loopback port of the demo's webhook: PDLIFT_DEMO_WEBHOOK_PORT, else one chosen once and kept."""
    if os.environ.get("PDLIFT_DEMO_WEBHOOK_PORT"):
        return int(os.environ["PDLIFT_DEMO_WEBHOOK_PORT"])
    kept = DEMO / "webhook.port"
    if not kept.exists():
        sys.path.insert(0, str(REPO))
        from sandbox.ports import free_port  # standard library only; not a port an outgoing connection takes

        kept.write_text(str(free_port()))
    return int(kept.read_text())


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
    """Follow a run to its end: a line per stage (its subflow runs) once it ends, a live line with
    its progress meanwhile on a terminal; the run's whole log goes to the log file."""
    seen, printed, asked, names = set(), set(), set(), {}
    live = sys.stdout.isatty() and not VERBOSE
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        fr = http("GET", f"/flow_runs/{flow_run_id}")
        subflows = _subflows(flow_run_id, names)
        for line in _new_log_lines([flow_run_id] + [sub["id"] for sub in subflows], seen):
            note(line)
        now = dt.datetime.now(dt.timezone.utc)
        running = None
        for sub in subflows:
            if sub["id"] in printed:
                continue
            if sub["state_type"] in TERMINAL:
                printed.add(sub["id"])
                _clear(live)
                say(demo_view.line(sub, _progress(sub["id"]), now))
            elif sub["state_type"] == "RUNNING":
                running = sub
            elif sub["state_type"] == "PAUSED" and sub["id"] not in asked:
                asked.add(sub["id"])  # an INCONCLUSIVE gate waits for a person: say where, once
                _clear(live)
                say(f"  {demo_view.stage_name(sub['flow_name'])}: waiting for your approval (INCONCLUSIVE gate): "
                    f"approve or reject at {UI}/runs/flow-run/{sub['id']}")
        if live and running is not None:
            print("\r" + demo_view.line(running, _progress(running["id"]), now)[:150].ljust(150), end="", flush=True)
        if fr["state_type"] in TERMINAL:
            _clear(live)
            return fr
        time.sleep(2)
    _clear(live)
    fail(f"the run did not finish within {timeout_s:.0f} s; see {UI}/runs/flow-run/{flow_run_id}")


def _clear(live: bool) -> None:
    if live:
        print("\r" + " " * 150 + "\r", end="", flush=True)


def _subflows(flow_run_id: str, names: dict[str, str]) -> list[dict]:
    runs = http("POST", "/flow_runs/filter", {"flow_runs": {"parent_flow_run_id": {"any_": [flow_run_id]}},
                                              "sort": "START_TIME_ASC", "limit": 50})
    for run in runs:
        if run["flow_id"] not in names:
            names[run["flow_id"]] = http("GET", f"/flows/{run['flow_id']}")["name"]
        run["flow_name"] = names[run["flow_id"]]
    return runs


def _progress(flow_run_id: str) -> float | None:
    arts = http("POST", "/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [flow_run_id]},
                                                            "type": {"any_": ["progress"]}}, "limit": 100})
    return demo_view.progress(arts)


def _new_log_lines(flow_run_ids: list[str], seen: set) -> list[str]:
    """The run's and its stages' log lines not seen yet, oldest first (the API pages by 200)."""
    out: list[str] = []
    offset = 0
    while True:
        page = http("POST", "/logs/filter", {"logs": {"flow_run_id": {"any_": flow_run_ids}, "level": {"ge_": 20}},
                                             "sort": "TIMESTAMP_ASC", "limit": 200, "offset": offset})
        for entry in page:
            if entry["id"] not in seen:
                seen.add(entry["id"])
                out.append(entry["message"].splitlines()[0][:300])  # first line: no tracebacks here
        if len(page) < 200:
            return out
        offset += len(page)


def _errors(flow_run_id: str, count: int = 12) -> list[str]:
    """The run's (and its stages') last warnings and errors: why it failed."""
    ids = [flow_run_id] + [r["id"] for r in http("POST", "/flow_runs/filter", {
        "flow_runs": {"parent_flow_run_id": {"any_": [flow_run_id]}}, "limit": 50})]
    logs = http("POST", "/logs/filter", {"logs": {"flow_run_id": {"any_": ids}, "level": {"ge_": 30}},
                                         "sort": "TIMESTAMP_DESC", "limit": count})
    lines = [entry["message"].splitlines()[0][:300] for entry in reversed(logs)]
    # Prefect says the same failure again as each enclosing run ends: pdlift's own lines and the first telling
    return [line for line in lines if not line.startswith(PREFECT_ECHOES)]


def summary(flow_run_id: str, fr: dict, blueprint: str, env: dict[str, str]) -> None:
    arts = http("POST", "/artifacts/filter", {"artifacts": {"key": {"like_": "migration-"}}, "sort": "CREATED_DESC",
                                              "limit": 1})
    say(f"\n== migrate finished: {fr['state_name']} ==")
    if fr["state_type"] != "COMPLETED":
        for line in _errors(flow_run_id):
            say(f"  ! {line}")
    if arts:
        say(arts[0]["data"])
    status = subprocess.run([str(BIN / "pdlift"), "status", blueprint], env=env, cwd=REPO, capture_output=True,
                            text=True)
    note(status.stderr)
    if status.returncode == 0:
        say("\n" + status.stdout.rstrip())
    say(f"\nPrefect UI: {UI}/runs/flow-run/{flow_run_id}  (artifacts: {UI}/artifacts)")
    received = NOTIFICATIONS.read_text().splitlines() if NOTIFICATIONS.exists() else []
    say(f"Notifications received by the demo's webhook: {len(received)} ({NOTIFICATIONS})")
    say(f"Full log: {LOG}")
    say(f"Status again: set -a; . {ENV_FILE}; set +a; .venv/bin/pdlift status {blueprint}")
    say("Stop everything: scripts/demo --down")


def flow_run_processes() -> list[int]:
    """The flow-run processes of the demo's worker still alive: those with the demo's Prefect home
    and a flow run id in their environment (the worker hands both down; Linux's /proc)."""
    home = f"PREFECT_HOME={DEMO / 'prefect-home'}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:  # gone since the listing, or not ours to read
            continue
        if home in environ and any(item.startswith(b"PREFECT__FLOW_RUN_ID=") for item in environ):
            found.append(int(entry.name))
    return found


FLOW_RUN_GRACE_S = 10  # after SIGTERM: a flow run's engine reports its state before it exits


def stop_flow_runs() -> None:
    """Stop what the worker started. Prefect's process worker starts each flow run in a session of
    its own (prefect/runner/_starter_engine.py, isolate_process_group), so stopping the worker's
    process group leaves them: a run paused for a person's approval would wait on, for hours, after
    `--down`."""
    for pid in flow_run_processes():
        for sig, grace in ((signal.SIGTERM, FLOW_RUN_GRACE_S), (signal.SIGKILL, 2)):
            try:
                os.killpg(os.getpgid(pid), sig)
            except OSError:
                break
            deadline = time.monotonic() + grace
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            if not _alive(pid):
                print(f"demo: stopped flow run process {pid}")
                break


def down() -> None:
    import demo_postgres

    stop("worker")
    stop_flow_runs()
    stop("webhook")
    stop("prefect-server")
    demo_postgres.stop(DEMO)
    subprocess.run([str(REPO / "scripts" / "sandbox"), "down"], env={**os.environ, "PDLIFT_STATE_DIR": str(STATE)},
                   cwd=REPO)


def main() -> int:
    global VERBOSE
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
    parser.add_argument("--verbose", action="store_true", help="show every tool's output and the run's log here too")
    parser.add_argument("--timeout", type=float, default=1800)
    args = parser.parse_args()
    VERBOSE = args.verbose
    if args.down:
        down()
        return 0
    if args.redeploy:
        say(f"pdlift demo: the scheduled `redeploy` of {args.blueprint} now (strategy {args.strategy}); "
            f"log: {LOG}")
        flow_run_id = trigger(args.blueprint, "redeploy", args.strategy)
        say(f"demo: redeploy started: {UI}/runs/flow-run/{flow_run_id}")
        fr = follow(flow_run_id, args.timeout)
        say(f"\n== redeploy finished: {fr['state_name']} ==")
        if fr["state_type"] != "COMPLETED":
            for line in _errors(flow_run_id):
                say(f"  ! {line}")
        say(f"Prefect UI: {UI}/runs/flow-run/{flow_run_id}  (the strategy-* artifact says why that strategy)")
        say(f"Full log: {LOG}")
        return 0 if fr["state_type"] == "COMPLETED" else 1
    if not os.environ.get(SET_UP):
        header(args.blueprint, args.postgres)
        setup()
    env = up(args.blueprint, args.postgres)
    flow_run_id = trigger(args.blueprint)
    say(f"demo: migrate started: {UI}/runs/flow-run/{flow_run_id}")
    fr = follow(flow_run_id, args.timeout)
    summary(flow_run_id, fr, args.blueprint, env)
    return 0 if fr["state_type"] == "COMPLETED" else 1


if __name__ == "__main__":
    sys.exit(main())
