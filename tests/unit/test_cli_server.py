"""The CLI and its Prefect API (cli/server.py): a flow command checks the API before any flow code
runs and explains a missing one in one line (exit 1, no traceback); commands that run no flow never
look for a server. Loopback only: closed ports, and small stub servers on 127.0.0.1."""

from __future__ import annotations

import contextlib
import http.server
import os
import re
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from cli import server
from cli.main import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
BP = str(ROOT / "blueprints" / "sandbox-2p2d.yaml")
FIX = "start it (`prefect server start`) or unset PREFECT_API_URL to let pdlift start a temporary one"

# Every command that runs a flow, and the flow it runs (patched here to prove it never ran).
FLOW_COMMANDS = {
    "reserve": (["reserve", BP], "flows.reserve", "reserve_flow"),
    "launch": (["launch", BP], "flows.launch", "launch_flow"),
    "fabric validate": (["fabric", "validate", BP], "flows.fabric", "fabric_flow"),
    "stage-weights": (["stage-weights", BP], "flows.weights", "weights_flow"),
    "deploy": (["deploy", BP], "flows.deploy", "deploy_flow"),
    "benchmark-gate": (["benchmark-gate", BP], "flows.benchmark", "benchmark_flow"),
    "redeploy": (["redeploy", BP], "flows.redeploy", "redeploy"),
    "teardown": (["teardown", BP], "flows.teardown", "teardown_flow"),
    "sweep": (["sweep"], "flows.sweep", "sweep_flow"),
    "plan-flow": (["plan-flow", BP], "flows.plan", "plan_flow"),
}
# The commands that run no flow (`fabric parse` and `deploy --render-only` neither).
NO_FLOW = {"validate", "plan", "benchmark", "gate", "rollback", "weights", "state", "iam-policy", "eks-token", "status",
           "notify"}


@pytest.fixture
def closed_port():
    """A loopback port nothing listens on: bound, never listening (refuses, and cannot be reused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(DO_NOT_TRACK="1", PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_HOME=str(tmp_path / "prefect"),
               PDLIFT_STATE_DIR=str(tmp_path / "state"), **extra)
    return env


def pdlift(tmp_path: Path, *args: str, timeout: float = 90, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli.main", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=_env(tmp_path, **env))


class _Health(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self):  # noqa: N802
        code = type(self).status if self.path == "/api/health" else 404
        self.send_response(code)
        self.send_header("Content-Length", "4")
        self.end_headers()
        self.wfile.write(b"true")

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def stub_api(status: int = 200):
    """A loopback HTTP server whose /api/health answers ``status``; yields its API URL."""
    handler = type("Handler", (_Health,), {"status": status})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/api"
    finally:
        httpd.shutdown()
        httpd.server_close()


@contextlib.contextmanager
def api_url(url: str | None):
    from prefect.settings import PREFECT_API_URL, temporary_settings

    if url is None:
        with temporary_settings(restore_defaults={PREFECT_API_URL}):
            yield
    else:
        with temporary_settings(updates={PREFECT_API_URL: url}):
            yield


def _forbid_flows(monkeypatch) -> list[str]:
    ran: list[str] = []
    # Every module imported before any is patched: a module first imported while another's flow is
    # patched (flows.redeploy imports flows.update, which binds deploy_flow and benchmark_flow)
    # would keep the stand-in for the rest of the session.
    modules = [(__import__(module, fromlist=[name]), name) for _, module, name in FLOW_COMMANDS.values()]
    for mod, name in modules:
        monkeypatch.setattr(mod, name, lambda *a, _name=name, **k: ran.append(_name))
    return ran


# (a) PREFECT_API_URL set, nothing answers

def test_an_unreachable_api_is_one_line_exit_1_no_traceback_and_no_run_state(tmp_path, closed_port):
    url = f"http://127.0.0.1:{closed_port}/api"
    out = pdlift(tmp_path, "reserve", BP, PREFECT_API_URL=url)
    assert out.returncode == 1
    assert out.stderr.splitlines() == [
        f"pdlift reserve: the Prefect API at {url} does not answer (connection refused); {FIX}"]
    assert "Traceback" not in out.stderr + out.stdout and out.stdout == ""
    assert not (tmp_path / "state").exists()  # no ledger, no run directory: the flow never started


@pytest.mark.parametrize("command", FLOW_COMMANDS, ids=str)
def test_every_flow_command_checks_the_api_before_its_flow(command, closed_port, monkeypatch, capsys):
    argv, _, _ = FLOW_COMMANDS[command]
    ran = _forbid_flows(monkeypatch)
    url = f"http://127.0.0.1:{closed_port}/api"
    with api_url(url):
        assert main(argv) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"pdlift {argv[0]}: the Prefect API at {url} does not answer (")
    assert err[0].endswith(FIX)
    assert ran == []


def test_every_command_is_classified_as_running_a_flow_or_not():
    """A new command must say which it is (and, if it runs a flow, be tested above)."""
    _, handlers = build_parser()
    assert set(handlers) == NO_FLOW | {argv[0] for argv, _, _ in FLOW_COMMANDS.values()}


def test_an_answering_api_is_used_as_is(monkeypatch, capsys):
    ran = _forbid_flows(monkeypatch)
    with stub_api() as url, api_url(url):
        assert server.ensure_api() == url
        assert main(["plan-flow", BP]) == 0
    assert ran == ["plan_flow"]


def test_teardown_takes_a_blueprint_a_newer_rule_refuses_and_a_run_does_not(monkeypatch, capsys, tmp_path):
    """An older blueprint (its image by tag) still tears its fleet down; reserving with it is refused."""
    older = tmp_path / "older.yaml"
    older.write_text(re.sub(r"/vllm@sha256:[0-9a-f]{64}", "/vllm:v0.22.0", Path(BP).read_text()))
    assert "/vllm:v0.22.0\n" in older.read_text()
    ran = _forbid_flows(monkeypatch)
    monkeypatch.setattr("flows.teardown.teardown_flow", lambda *a: ran.append("teardown_flow") or ["released"])
    with stub_api() as url, api_url(url):
        assert main(["teardown", str(older)]) == 0
        assert main(["reserve", str(older)]) == 2
    assert ran == ["teardown_flow"]
    assert "engine.image" in capsys.readouterr().err


def test_the_api_going_away_during_a_flow_is_the_same_one_line(monkeypatch, capsys):
    import flows.reserve
    import httpx

    with stub_api() as url, api_url(url):
        def gone(*a, **k):
            raise httpx.ConnectError("[Errno 111] Connection refused",
                                     request=httpx.Request("POST", url + "/flow_runs/"))

        monkeypatch.setattr(flows.reserve, "reserve_flow", gone)
        assert main(["reserve", BP]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [f"pdlift reserve: the Prefect API at {url} does not answer (connection refused); {FIX}"]


def test_an_error_that_is_not_about_the_api_keeps_its_traceback(monkeypatch):
    import flows.reserve

    def boom(*a, **k):
        raise RuntimeError("a bug")

    monkeypatch.setattr(flows.reserve, "reserve_flow", boom)
    with stub_api() as url, api_url(url), pytest.raises(RuntimeError, match="a bug"):
        main(["reserve", BP])


# The health check itself

def test_a_loopback_api_is_asked_directly_never_through_a_proxy(monkeypatch, closed_port):
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.setenv(var, f"http://127.0.0.1:{closed_port}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    with stub_api() as url:
        assert server.health(url) is None


def test_a_url_that_is_not_the_api_says_so():
    with stub_api() as url:
        reason = server.health(url.removesuffix("/api"))
    assert reason.startswith("HTTP 404") and "/api" in reason


def test_a_server_that_accepts_but_never_answers_is_given_up_on(monkeypatch):
    monkeypatch.setattr(server, "CHECK_TIMEOUT_S", 0.3)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen(4)  # connections queue, nothing reads them
        assert server.health(f"http://127.0.0.1:{s.getsockname()[1]}/api") == "no answer within 0.3 s"


def test_not_a_url():
    assert server.health("127.0.0.1:4200/api") == "not an http(s) URL"


# (b) PREFECT_API_URL unset: Prefect's temporary server, bounded

TIMEOUT = "Timed out while attempting to connect to ephemeral Prefect API server."


def _one_startup_line(err: str, command: str) -> str:
    ours = [line for line in err.splitlines() if line.startswith("pdlift")]
    assert len(ours) == 1, err
    line = ours[0]
    assert line.startswith(f"pdlift {command}: Prefect's temporary server did not start")
    assert "set PREFECT_API_URL to a running server (`prefect server start`)" in line
    assert "raise PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS" in line
    return line


def test_prefects_timeout_from_the_flow_call_is_one_line_and_exit_1(monkeypatch, capsys):
    """As Prefect raises it when its get_client() starts the server lazily (the reported traceback)."""
    import flows.launch
    from prefect.server.api.server import SubprocessASGIServer

    monkeypatch.setattr(SubprocessASGIServer, "start", lambda self, timeout=None: None)

    def timed_out(*a, **k):
        raise RuntimeError(TIMEOUT)

    monkeypatch.setattr(flows.launch, "launch_flow", timed_out)
    with api_url(None):
        assert main(["launch", BP]) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    _one_startup_line(err, "launch")


def test_the_temporary_server_is_started_before_the_flow_with_the_bound(monkeypatch, capsys):
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import get_current_settings

    asked: list[int] = []

    def start(self, timeout=None):
        asked.append(timeout)
        raise RuntimeError(TIMEOUT + " Ephemeral server process exited with code 3.")

    monkeypatch.setattr(SubprocessASGIServer, "start", start)
    ran = _forbid_flows(monkeypatch)
    with api_url(None):
        assert main(["deploy", BP]) == 1
        expected = server.startup_bound(get_current_settings())
    assert asked == [expected] and ran == []
    line = _one_startup_line(capsys.readouterr().err, "deploy")
    assert f"within {expected} s; its process exited with code 3;" in line


def test_the_bound_is_pdlifts_60_s_unless_prefects_setting_is_set(monkeypatch, tmp_path):
    from prefect.settings import Settings

    monkeypatch.setenv("PREFECT_HOME", str(tmp_path))
    monkeypatch.delenv("PREFECT_PROFILES_PATH", raising=False)
    monkeypatch.delenv(server.STARTUP_SETTING, raising=False)
    assert server.startup_bound(Settings()) == server.DEFAULT_STARTUP_S == 60
    monkeypatch.setenv(server.STARTUP_SETTING, "7")
    assert server.startup_bound(Settings()) == 7


def test_a_real_startup_timeout_is_one_line_exit_1_no_traceback(tmp_path):
    """Prefect's own timeout, not a simulation: a bound of 0 s cannot be met."""
    out = pdlift(tmp_path, "plan-flow", BP, PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="0")
    assert out.returncode == 1
    assert "Traceback" not in out.stderr + out.stdout
    assert "within 0 s" in _one_startup_line(out.stderr, "plan-flow")


def test_a_disabled_temporary_server_is_one_line(tmp_path):
    out = pdlift(tmp_path, "launch", BP, PREFECT_SERVER_EPHEMERAL_ENABLED="false")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.splitlines() == [
        "pdlift launch: PREFECT_API_URL is unset and Prefect's temporary server is disabled "
        "(PREFECT_SERVER_EPHEMERAL_ENABLED=false); set PREFECT_API_URL to a running server "
        "(`prefect server start`), or enable it"]


# (c) commands that run no flow never look for a server

NO_SERVER_CHECK = """
import sys
from cli.main import main
rc = main(sys.argv[1:])
assert "prefect" not in sys.modules and "httpx" not in sys.modules, "a command without a flow loaded Prefect"
sys.exit(rc)
"""


@pytest.mark.parametrize("argv", [["plan", BP], ["plan", BP, "--json"], ["validate", BP], ["iam-policy"]],
                         ids=lambda a: " ".join(a[:1] + a[2:]))
def test_commands_without_a_flow_work_with_an_unreachable_api_and_never_load_prefect(argv, tmp_path, closed_port):
    env = _env(tmp_path, PREFECT_API_URL=f"http://127.0.0.1:{closed_port}/api")
    out = subprocess.run([sys.executable, "-c", NO_SERVER_CHECK, *argv], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stderr == "" and out.stdout


def test_deploy_render_only_contacts_no_server(tmp_path, closed_port):
    out = pdlift(tmp_path, "deploy", BP, "--render-only", str(tmp_path / "out"),
                 PREFECT_API_URL=f"http://127.0.0.1:{closed_port}/api")
    assert out.returncode == 0, out.stderr
    assert "nothing applied" in out.stdout
