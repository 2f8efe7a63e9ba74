"""`scripts/demo` as a new operator runs it: a short header naming the log, a line per step and per
stage, then the summary; `pdlift status` on the account before (nothing) and after (the fleet).

The same run carries canary secrets (tests/fixtures/canary.py): the sandbox accepts only a
recognisable AWS secret key (PDLIFT_SANDBOX_SECRET_KEY: its S3 and the Kubernetes stand-in's STS
check verify SigV4 with it), and the operator's SSH key is the sandbox's key encrypted with a
canary passphrase, read from the variable the blueprint's aws.ssh.key_passphrase_env names. After
the demo, a second run of the weights stage, from a worker whose AWS secret is wrong (a second
canary), fails. Neither canary, nor its base64, base64url, percent- or JSON-encoded forms, nor its
recognisable prefix alone, may then be in any log, artifact, event, flow or task run (parameters,
state messages, every state of the history), deployment, variable, work pool, ledger record, or
file under the state directory (the demo's log, its servers' logs, the Prefect home with the
server's database and results). The only files allowed to hold the secret are the credential files
handed to an operator to source (the sandbox's sandbox.env, the demo's demo.env) and the sandbox
S3 server's identity file.

It runs on a sandbox of its own (its own state directory, node addresses and SSH port, so no
other test's sandbox is touched) and stops everything with `scripts/demo --down`.
It runs in the suite's other lane (tests/lanes.py): what the demo prints and where the secrets go
is its subject, not the gate, so its blueprint has a person decide an INCONCLUSIVE gate
(gate.undecided: ask), and should its short benchmark be INCONCLUSIVE (a lagging load generator
on a busy machine), the test approves the paused gate as a person would."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml

from sandbox.s3 import free_port
from tests.fixtures import loopback
from tests.fixtures import canary
from tests.fixtures.blueprints import quick_gate
from tests.fixtures.prefect_server import Deployed, PrefectServer, _server_env, _stop, seeded_home

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]
REPO = Path(__file__).resolve().parents[2]
STAGES = ("reserve", "launch", "fabric", "weights", "deploy", "benchmark+gate")
MAX_LINES_BEFORE_SUMMARY = 40


def _blueprint(tmp_path: Path) -> tuple[Path, str, int]:
    doc = yaml.safe_load((REPO / "blueprints" / "sandbox-2p2d.yaml").read_text())
    base, port = loopback.node_base(), free_port()
    doc["sandbox"].update({"node_address_base": base, "ssh_port": port, "model_size_mb": 64})
    doc["aws"]["ssh"].update({"port": port, "key_passphrase_env": canary.PASSPHRASE_ENV})
    # What the demo prints and leaves, not its gate: one short point and wide margins, so a busy
    # machine does not suspend the run for a person (tests/fixtures/blueprints.py).
    quick_gate(doc)
    doc["gate"]["undecided"] = "ask"  # an INCONCLUSIVE one then waits for the approval _demo gives
    path = tmp_path / "demo-2p2d.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path, base, port


def _sandbox_env(state: Path) -> dict[str, str]:
    env = {}
    for line in (state / "sandbox.env").read_text().splitlines():
        if line.startswith("export ") and "=" in line:
            key, value = line[len("export "):].split("=", 1)
            env[key] = shlex.split(value)[0] if value else ""
    return env


def _status(bp: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(REPO / ".venv" / "bin" / "pdlift"), "status", str(bp), *extra], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=120)


APPROVAL = re.compile(r"waiting for your approval \(INCONCLUSIVE gate\): approve or reject at \S+/runs/flow-run/(\S+)")


def _approve(port: int, flow_run_id: str) -> dict:
    """Resume the paused gate with an approval, as the UI's button does. Asked again after a 503, as
    Prefect's own client does: a busy SQLite database answers "database is locked" with a 503 that
    says to retry (prefect/server/api/server.py, is_client_retryable_exception); one such answer,
    taken for the verdict, once left the demo waiting for an approval that had never landed."""
    try:
        for attempt in range(5):
            answer = httpx.post(f"http://127.0.0.1:{port}/api/flow_runs/{flow_run_id}/resume",
                                json={"run_input": {"approve": True, "note": "approved by the demo's test"}},
                                timeout=60)
            if answer.status_code != 503 or attempt == 4:
                break
            time.sleep(1 + attempt)
        return {"http_status": answer.status_code, **answer.json()}
    except (httpx.HTTPError, ValueError) as e:  # the test's verdict, not a dead reader thread
        return {"error": repr(e)}


def _demo(args: list[str], env: dict[str, str], port: int, state: Path) -> tuple[int, str, str, bool]:
    """(exit code, stdout, stderr, whether a gate was approved) of `scripts/demo ARGS`, run as a new
    operator would: should the demo say its gate waits for a person (its short benchmark
    INCONCLUSIVE on a busy machine: this test runs beside others), approve it in the UI's stead,
    as that person would. Fails with what it printed and its log's last lines past 1200 s."""
    proc = subprocess.Popen([str(REPO / "scripts" / "demo"), *args], env=env, cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    printed: list[str] = []
    errors: list[str] = []
    answers: list[dict] = []

    def read_out() -> None:
        for line in proc.stdout:
            printed.append(line)
            if (asked := APPROVAL.search(line)) and not answers:
                answers.append(_approve(port, asked.group(1)))

    readers = [threading.Thread(target=read_out, daemon=True),
               threading.Thread(target=lambda: errors.extend(proc.stderr), daemon=True)]
    for reader in readers:
        reader.start()
    try:
        proc.wait(timeout=1200)
    except subprocess.TimeoutExpired:  # what it printed and its log's last lines, to see where it was
        proc.kill()
        log_tail = "\n".join((state / "demo" / "demo.log").read_text(errors="replace").splitlines()[-80:])
        pytest.fail(f"the demo ran past 1200 s\n--- printed ---\n{''.join(printed)}\n--- demo.log ---\n{log_tail}")
    for reader in readers:
        reader.join(timeout=60)
    assert all(answer.get("status") == "ACCEPT" for answer in answers), answers
    return proc.returncode, "".join(printed), "".join(errors), bool(answers)


def test_the_demo_is_quiet_names_its_log_status_shows_its_fleet_and_its_canary_secrets_are_nowhere(tmp_path):
    state = tmp_path / "state"
    bp, _, _ = _blueprint(tmp_path)
    port = free_port()
    # The operator's shell: the sandbox's secret (the canary) and the SSH key's passphrase.
    env = {**os.environ, "PDLIFT_STATE_DIR": str(state), "PDLIFT_PREFECT_PORT": str(port),
           "DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "PDLIFT_SANDBOX_SECRET_KEY": canary.CANARY_SECRET, canary.PASSPHRASE_ENV: canary.CANARY_PASSPHRASE}
    env.pop("PREFECT_API_URL", None)
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 60))
    wrong_worker: list[subprocess.Popen] = []
    try:
        # An empty account first: the sandbox up, nothing of this deployment in it.
        up = subprocess.run([str(REPO / "scripts" / "sandbox"), "up", "--blueprint", str(bp)], env=env, cwd=REPO,
                            capture_output=True, text=True, timeout=300)
        assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-3000:]
        sandbox_env = _sandbox_env(state)
        assert sandbox_env["AWS_SECRET_ACCESS_KEY"] == canary.CANARY_SECRET  # what the sandbox accepts, and nothing else
        # The key the sandbox hands the operator, now with a passphrase (the sandbox only reads its .pub).
        key = Path(sandbox_env["PDLIFT_SSH_KEY_FILE"])
        assert not canary.is_encrypted(key)
        # The demo's Prefect home with the database Prefect migrates on its first start already
        # migrated (tests/fixtures/prefect_server.py): the demo starts Prefect's server all the same.
        seeded_home(state / "demo" / "prefect-home")
        canary.encrypted_copy(key, key)
        status_env = {**env, **sandbox_env}
        # Read from an older copy of the blueprint (its image by tag: a rule about what runs refuses
        # it), as an operator with last year's file would: status only reads, so it answers.
        older = tmp_path / "older.yaml"
        older.write_text(re.sub(r"/vllm@sha256:[0-9a-f]{64}", "/vllm:v0.22.0", bp.read_text()))
        assert "/vllm:v0.22.0\n" in older.read_text()
        empty = _status(older, status_env)
        assert empty.returncode == 0, empty.stderr
        assert "nothing running: no fleet billing, no live colour, no run in flight, nothing tagged" in empty.stdout
        assert json.loads(_status(bp, status_env, "--json").stdout)["empty"] is True

        # The demo's own limit on the run (about 3 min here) comes first: it then prints the run's errors.
        returncode, out, err, approved = _demo(["--blueprint", str(bp), "--timeout", "600"], env, port, state)
        assert returncode == 0, out[-3000:] + err[-3000:]
        before = out.split("== migrate finished")[0].rstrip("\n").splitlines()
        assert len(before) <= MAX_LINES_BEFORE_SUMMARY, out
        log = state / "demo" / "demo.log"
        assert str(log) in before[2], before[:3]  # the header names the log
        assert "prefect deploy" in log.read_text() and "prefect deploy" not in out  # tool output in the log only
        for stage in STAGES:
            assert re.search(rf"^  {re.escape(stage)} +[0-9.]+ s  completed", out, re.M), (stage, out)
        assert "== migrate finished: Completed ==" in out and "Stop everything: scripts/demo --down" in out
        demo_env = (state / "demo" / "demo.env").read_text()
        assert f"PREFECT_API_URL=http://127.0.0.1:{port}/api" in demo_env and "AWS_ENDPOINT_URL" in demo_env
        assert f". {state / 'demo' / 'demo.env'}" in out  # the status hint sources it

        automations = httpx.post(f"http://127.0.0.1:{port}/api/automations/filter", json={}, timeout=30).json()
        assert {"pdlift-gate-fail", "pdlift-gate-inconclusive"} <= {a["name"] for a in automations}
        assert "Notifications received by the demo's webhook:" in out

        shown = json.loads(_status(bp, status_env, "--json").stdout)
        (fleet,) = shown["fleets"]
        assert len(fleet["nodes"]) == 4 and fleet["reservation_state"] == "active" and fleet["zone"]
        assert shown["live_colour"] in ("blue", "green") and shown["images"]
        assert all("@sha256:" in image_id for _, image_id in shown["images"])  # what the kubelet pulled
        # PASS, or INCONCLUSIVE where the test approved it (then the demo said where to approve, once)
        assert shown["gate"]["outcome"] == ("INCONCLUSIVE" if approved else "PASS"), (approved, shown["gate"])
        assert out.count("waiting for your approval (INCONCLUSIVE gate)") == (1 if approved else 0), out
        assert shown["promoted_by_run"] == fleet["run_id"]
        assert shown["usd_per_hour"] > 0 and shown["in_flight"] == [] and shown["untracked"] == []
        assert any(r.startswith("capacity-reservation ") for r in shown["releases"])
        assert shown["teardown"] == f"pdlift teardown {bp}"
        screen = _status(bp, status_env).stdout
        assert f"fleet of run {fleet['run_id']}: 4 node(s)" in screen
        assert f"last gate: {shown['gate']['outcome']} (run {fleet['run_id']}" in screen, screen

        assert canary.is_encrypted(key)  # the demo ran with the encrypted key: its `sandbox up` left it as it was
        server = PrefectServer(f"http://127.0.0.1:{port}/api", {}, state / "demo" / "prefect-home", None)
        _a_wrong_secret_fails_saying_so(server, port, state, bp, fleet["run_id"], wrong_worker)
        _the_canaries_are_nowhere(server, state, since, fleet["run_id"])
    finally:
        for proc in wrong_worker:
            _stop(proc)
        subprocess.run([str(REPO / "scripts" / "demo"), "--down"], env=env, cwd=REPO, capture_output=True,
                       timeout=300)


def _stop_demo_worker(state: Path) -> None:
    """The demo's worker gone, as `scripts/demo --down` stops it (its process group, SIGTERM first)."""
    pid_file = state / "demo" / "worker.pid"
    pid = int(pid_file.read_text())
    for sig, grace in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
    pid_file.unlink()  # so `scripts/demo --down` does not signal whatever has the number next


def _a_wrong_secret_fails_saying_so(server: PrefectServer, port: int, state: Path, bp: Path, run_id: str,
                                    workers: list[subprocess.Popen]) -> None:
    """The demo run's weights again, from a worker whose AWS secret is wrong: it fails, saying so without it."""
    _stop_demo_worker(state)
    worker_env = {**_server_env(server.home, port), **_sandbox_env(state),
                  "PDLIFT_REPO": str(REPO), "PYTHONPATH": str(REPO), "PDLIFT_STATE_DIR": str(state),
                  canary.PASSPHRASE_ENV: canary.CANARY_PASSPHRASE, "AWS_SECRET_ACCESS_KEY": canary.WRONG_SECRET}
    deployed = Deployed(server, worker_env, state, log_dir=server.home)
    workers.append(deployed.start_worker())
    _, wrong = deployed.create_run("migrate", "migrate", {"params": {
        "blueprint": str(bp), "run_id": run_id, "stages": ["weights"], "rerun": ["weights"]}})
    failed = canary.wait_ended(server, wrong["id"], timeout_s=180)
    failure_log = canary.logs(server, wrong["id"])
    assert failed["state_type"] == "FAILED", failed["state"]["message"] + failure_log[-4000:]
    assert re.search(r"SignatureDoesNotMatch|AccessDenied|access denied|credentials", failure_log, re.I), \
        failure_log[-4000:]


# The credential files an operator is handed to source (the sandbox's, the demo's), and the identity
# file the sandbox's S3 server checks signatures against: the only files that may hold the secret.
CREDENTIAL_FILES = {"sandbox.env", "demo/demo.env", "sandbox/s3/s3-identity.json"}


def _the_canaries_are_nowhere(server: PrefectServer, state: Path, since: str, run_id: str) -> None:
    from tasks.adapters.ledger_store import LedgerStore

    leaks = {}
    for kind, records in canary.prefect_records(server, since).items():
        if where := canary.hits(json.dumps(records).encode()):
            leaks[f"Prefect API: {kind}"] = where
    ledger = LedgerStore(state).load("sandbox-2p2d", run_id)
    assert ledger is not None and ledger.records
    if where := canary.hits(json.dumps(ledger.to_dict(), default=str).encode()):
        leaks["ledger"] = where
    in_state = canary.files_with_canary(state)  # the Prefect home (state/demo/prefect-home) included
    assert "sandbox.env" in in_state and "demo/demo.env" in in_state  # the search does find the canary where it is
    for rel, where in in_state.items():
        if rel not in CREDENTIAL_FILES:
            leaks[f"state dir: {rel}"] = where
    assert not leaks, json.dumps(leaks, indent=1)[:6000]


def test_a_failing_step_prints_its_last_lines_and_the_log_and_stops(tmp_path):
    env = {**os.environ, "PDLIFT_STATE_DIR": str(tmp_path / "state"), "PDLIFT_PREFECT_PORT": str(free_port())}
    demo = subprocess.run([str(REPO / "scripts" / "demo"), "--blueprint", str(tmp_path / "missing.yaml")], env=env,
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert demo.returncode != 0
    log = tmp_path / "state" / "demo" / "demo.log"
    assert "demo: blueprint failed (exit 2)" in demo.stderr and f"full log: {log}" in demo.stderr
    assert "missing.yaml: (document): cannot read file" in demo.stderr  # pdlift's own line, not a traceback
    assert "    | " in demo.stderr  # the step's last lines
    assert "missing.yaml" in log.read_text()
    assert "== migrate finished" not in demo.stdout
