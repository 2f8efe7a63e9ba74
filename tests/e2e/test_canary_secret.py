"""A canary secret through a whole migrate: a recognisable AWS secret key and SSH key passphrase,
and afterwards neither is anywhere pdlift or Prefect keeps things.

The sandbox of its own (its own state directory, node addresses and SSH port) accepts only the
canary secret (PDLIFT_SANDBOX_SECRET_KEY: its S3 and the Kubernetes stand-in's STS check verify
SigV4 with it); the worker's SSH key is the sandbox key encrypted with the canary passphrase, read
from the variable the blueprint's aws.ssh.key_passphrase_env names. The `migrate` deployment runs
on a process worker against a Prefect server of this test's; then a second run of the weights stage
from a worker whose AWS secret is wrong (a second canary) fails. Neither canary, nor its base64,
base64url, percent- or JSON-encoded forms, nor its recognisable prefix alone, may then be in any
log, artifact, event, flow or task run (parameters, state messages, every state of the history),
deployment, ledger record, or file under the state directory or the Prefect home (the server's
database, results, worker logs). The only files allowed to hold the secret are the sandbox's own
credential files: what it hands an operator (sandbox.env) and its S3 server's identity file.

It runs in the suite's other lane (tests/lanes.py), at the lowest priority: its subject is where
the secret goes, not the gate, so should its short benchmark be INCONCLUSIVE (a lagging load
generator on a busy machine), the test approves the paused gate as a person would and the run
promotes; either way the secret has been through every stage.
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from sandbox.s3 import free_port
from tests.fixtures import loopback
from tests.fixtures.blueprints import quick_gate
from tests.fixtures.prefect_server import BIN, NO_PROXY, Deployed, PrefectServer, _server_env, _stop, wait_healthy

REPO = Path(__file__).resolve().parents[2]
PREFIX = "pdliftCANARY"
# 40 characters with a '/' and a '+', as real AWS secret keys have (so percent-encoding changes it)
CANARY_SECRET = f"{PREFIX}secret{secrets.token_hex(9)}/+Zz"
WRONG_SECRET = f"{PREFIX}wrongkey{secrets.token_hex(10)}"
CANARY_PASSPHRASE = f"{PREFIX}passphrase-{secrets.token_hex(8)}"
PASSPHRASE_ENV = "PDLIFT_CANARY_SSH_PASSPHRASE"
# The sandbox's own credential files (not pdlift's): what `scripts/sandbox up` hands an operator to
# source, and the identity file its S3 server checks signatures against.
SANDBOX_CREDENTIAL_FILES = {"sandbox.env", "sandbox/s3/s3-identity.json"}


def _forms(secret: str) -> dict[str, bytes]:
    """The byte strings that betray ``secret``: raw, escaped, and base64 at every alignment (the
    groups of a longer encoded text that hold its bytes only)."""
    raw = secret.encode()
    forms = {"raw": raw, "percent": urllib.parse.quote(secret, safe="").encode(),
             "form": urllib.parse.quote_plus(secret).encode(), "json": json.dumps(secret)[1:-1].encode()}
    for name, encode in (("base64", base64.b64encode), ("base64url", base64.urlsafe_b64encode)):
        for offset in range(3):
            encoded = encode(b"\0" * offset + raw)
            forms[f"{name}@{offset}"] = encoded[-(-offset // 3) * 4:(offset + len(raw)) // 3 * 4]
    return forms


def _matcher() -> re.Pattern[bytes]:
    needles = {PREFIX.encode(), *_forms(PREFIX).values()}
    for secret in (CANARY_SECRET, WRONG_SECRET, CANARY_PASSPHRASE):
        needles |= set(_forms(secret).values())
        needles.add(secret[len(PREFIX) + 6:].encode())  # its random tail, should the prefix be cut off
    return re.compile(b"|".join(re.escape(n) for n in sorted(needles, key=len, reverse=True)))


LEAK = _matcher()


def _hits(data: bytes) -> list[str]:
    return [data[max(0, m.start() - 80):m.end() + 80].decode("utf-8", "replace") for m in LEAK.finditer(data)][:3]


def _blueprint(tmp_path: Path) -> Path:
    doc = yaml.safe_load((REPO / "blueprints" / "sandbox-2p2d.yaml").read_text())
    port = free_port()
    doc["sandbox"].update({"node_address_base": loopback.node_base(), "ssh_port": port,
                           "model_size_mb": 64})
    doc["aws"]["ssh"].update({"port": port, "key_passphrase_env": PASSPHRASE_ENV})
    # Not a test of the gate: one short point, wide margins, so a loaded machine never makes it
    # INCONCLUSIVE (a run suspended for a person's approval).
    quick_gate(doc)
    path = tmp_path / "canary-2p2d.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _sandbox_env(state: Path) -> dict[str, str]:
    import shlex

    env = {}
    for line in (state / "sandbox.env").read_text().splitlines():
        if line.startswith("export ") and "=" in line:
            key, value = line[len("export "):].split("=", 1)
            env[key] = shlex.split(value)[0] if value else ""
    return env


def _encrypted_copy(key_file: Path, dest: Path) -> Path:
    """The sandbox's SSH client key, encrypted with the canary passphrase (OpenSSH format, bcrypt KDF)."""
    from cryptography.hazmat.primitives import serialization as ser

    key = ser.load_ssh_private_key(key_file.read_bytes(), None)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(key.private_bytes(ser.Encoding.PEM, ser.PrivateFormat.OpenSSH,
                                       ser.BestAvailableEncryption(CANARY_PASSPHRASE.encode())))
    dest.chmod(0o600)
    return dest


def _paged(server: PrefectServer, path: str, body: dict, limit: int = 200) -> list[dict]:
    out: list[dict] = []
    while True:
        _, page = server.http("POST", path, {**body, "limit": limit, "offset": len(out)})
        out += page
        if len(page) < limit:
            return out


def _events(server: PrefectServer, since: str) -> list[dict]:
    """Every event since ``since`` (the server writes them in batches: wait until the count settles)."""
    def fetch() -> list[dict]:
        _, answer = server.http("POST", "/events/filter", {"filter": {"occurred": {"since": since}}, "limit": 50})
        events = list(answer.get("events") or [])
        while answer.get("next_page"):
            req = urllib.request.Request(answer["next_page"], method="GET")
            with NO_PROXY.open(req, timeout=30) as resp:
                answer = json.loads(resp.read())
            events += answer.get("events") or []
        return events

    last: list[dict] = []
    for _ in range(10):
        events = fetch()
        if last and len(events) == len(last):
            return events
        last = events
        time.sleep(2)
    return last


def _prefect_records(server: PrefectServer, since: str) -> dict[str, list]:
    """What the Prefect API holds, by kind (everything of this test's server)."""
    flow_runs = _paged(server, "/flow_runs/filter", {})
    records = {
        "logs": _paged(server, "/logs/filter", {"sort": "TIMESTAMP_ASC"}),
        "artifacts": _paged(server, "/artifacts/filter", {}),
        "flow_runs": flow_runs,
        "task_runs": _paged(server, "/task_runs/filter", {}),
        "flow_run_states": [server.http("GET", f"/flow_run_states/?flow_run_id={fr['id']}")[1] for fr in flow_runs],
        "deployments": _paged(server, "/deployments/filter", {}),
        "variables": _paged(server, "/variables/filter", {}),
        "work_pools": server.http("POST", "/work_pools/filter", {})[1],
        "events": _events(server, since),
    }
    assert records["logs"] and records["artifacts"] and records["events"], {k: len(v) for k, v in records.items()}
    return records


def _files_with_canary(root: Path) -> dict[str, list[str]]:
    found = {}
    for path in sorted(root.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        try:
            data = path.read_bytes()
        except OSError:  # a socket, a file gone since the walk
            continue
        if hits := _hits(data):
            found[str(path.relative_to(root))] = hits
    return found


def _logs(server: PrefectServer, flow_run_id: str) -> str:
    ids = [flow_run_id] + [r["id"] for r in _paged(server, "/flow_runs/filter", {
        "flow_runs": {"parent_flow_run_id": {"any_": [flow_run_id]}}})]
    return "\n".join(e["message"] for e in _paged(server, "/logs/filter", {
        "logs": {"flow_run_id": {"any_": ids}}, "sort": "TIMESTAMP_ASC"}))


def _paused_stage(server: PrefectServer, flow_run_id: str) -> str | None:
    """The id of the run's stage that waits for a person (a paused subflow: an INCONCLUSIVE gate), if any."""
    paused = _paged(server, "/flow_runs/filter", {"flow_runs": {
        "parent_flow_run_id": {"any_": [flow_run_id]}, "state": {"type": {"any_": ["PAUSED"]}}}})
    return paused[0]["id"] if paused else None


def _wait(server: PrefectServer, flow_run_id: str, timeout_s: float) -> dict:
    """The run once it ends, or once it or one of its stages is paused (an INCONCLUSIVE gate waits
    for a person); else fail saying where it stands: its stages' states and its last log lines."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        _, run = server.http("GET", f"/flow_runs/{flow_run_id}")
        if run["state_type"] in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED", "PAUSED") \
                or _paused_stage(server, flow_run_id):
            return run
        time.sleep(2)
    stages = [(server.http("GET", f"/flows/{r['flow_id']}")[1]["name"], r["state_name"]) for r in _paged(server, "/flow_runs/filter", {
        "flow_runs": {"parent_flow_run_id": {"any_": [flow_run_id]}}})]
    worker_logs = "".join(p.read_text(errors="replace")[-1500:] for p in sorted(server.home.glob("worker-*.log")))
    raise AssertionError(f"flow run {flow_run_id} {run['state_name']} after {timeout_s:.0f} s; stages {stages}\n"
                         f"{_logs(server, flow_run_id)[-3000:]}\n--- worker ---\n{worker_logs}")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_canary_secret_and_ssh_passphrase_are_nowhere_after_a_whole_migrate_and_a_failed_run(tmp_path):
    state, home = tmp_path / "state", tmp_path / "prefect-home"
    home.mkdir()
    bp = _blueprint(tmp_path)
    run_id = "canary-" + secrets.token_hex(3)
    env = {**os.environ, "PDLIFT_STATE_DIR": str(state), "DO_NOT_TRACK": "1",
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    server = deployed = None
    started = time.monotonic()
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 60))
    try:
        up = subprocess.run([str(REPO / "scripts" / "sandbox"), "up", "--blueprint", str(bp), "--timeout", "120"],
                            env={**env, "PDLIFT_SANDBOX_SECRET_KEY": CANARY_SECRET}, cwd=REPO,
                            capture_output=True, text=True, timeout=300)
        assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-2000:]
        sandbox_env = _sandbox_env(state)
        assert sandbox_env["AWS_SECRET_ACCESS_KEY"] == CANARY_SECRET  # what the sandbox accepts, and nothing else
        key = _encrypted_copy(Path(sandbox_env["PDLIFT_SSH_KEY_FILE"]), tmp_path / "keys" / "id_ed25519")

        port = free_port()
        server_env = {**_server_env(home, port), "PDLIFT_STATE_DIR": str(state)}
        log = open(home / "server.log", "ab")
        proc = subprocess.Popen([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port),
                                 "--analytics-off"], env=server_env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        server = PrefectServer(server_env["PREFECT_API_URL"], server_env, home, proc)
        wait_healthy(server, 180, lambda: (home / "server.log").read_text()[-2000:])

        # The operator's shell: the sandbox's variables (the canary secret), the encrypted key and its passphrase.
        worker_env = {**server_env, **sandbox_env, "PDLIFT_REPO": str(REPO), "PYTHONPATH": str(REPO),
                      "PDLIFT_SSH_KEY_FILE": str(key), PASSPHRASE_ENV: CANARY_PASSPHRASE}
        subprocess.run([str(BIN / "prefect"), "work-pool", "create", "pdlift", "--type", "process"], env=worker_env,
                       cwd=REPO, capture_output=True, timeout=120)
        out = subprocess.run([str(BIN / "prefect"), "--no-prompt", "deploy", "--name", "migrate"], env=worker_env,
                             cwd=REPO, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        deployed = Deployed(server, worker_env, state, log_dir=home)
        first_worker = deployed.start_worker()

        _, run = deployed.create_run("migrate", "migrate", {"params": {"blueprint": str(bp), "run_id": run_id}})
        finished = _wait(server, run["id"], timeout_s=540)
        gate = _paused_stage(server, run["id"]) or (run["id"] if finished["state_type"] == "PAUSED" else None)
        if gate:
            # The quick gate was INCONCLUSIVE (this test shares the machine with others, and its load
            # generator lagged): a person approves in the UI, which resumes the paused gate with its
            # input, and the run promotes. The secret goes through that path too (the approval
            # form, the resumed run's logs and states).
            _, resumed = server.http("POST", f"/flow_runs/{gate}/resume",
                                     {"run_input": {"approve": True, "note": "approved by the canary test"}})
            assert resumed["status"] == "ACCEPT", resumed
            resumed_by = time.monotonic() + 60
            while _paused_stage(server, run["id"]) == gate:
                assert time.monotonic() < resumed_by, "the approved gate stayed paused for 60 s"
                time.sleep(0.5)
            finished = _wait(server, run["id"], timeout_s=300)
        assert finished["state_type"] == "COMPLETED", finished["state"]["message"] + _logs(server, run["id"])[-4000:]
        migrated_s = time.monotonic() - started

        # The same run's weights again, from a worker whose AWS secret is wrong: it must fail, saying so without it.
        _stop(first_worker)
        deployed.worker_env = {**worker_env, "AWS_SECRET_ACCESS_KEY": WRONG_SECRET}
        deployed.start_worker()
        _, wrong = deployed.create_run("migrate", "migrate", {"params": {
            "blueprint": str(bp), "run_id": run_id, "stages": ["weights"], "rerun": ["weights"]}})
        failed = _wait(server, wrong["id"], timeout_s=180)
        failure_log = _logs(server, wrong["id"])
        assert failed["state_type"] == "FAILED", failed["state"]["message"] + failure_log[-4000:]
        assert re.search(r"SignatureDoesNotMatch|AccessDenied|access denied|credentials", failure_log, re.I), \
            failure_log[-4000:]

        leaks = {}
        for kind, records in _prefect_records(server, since).items():
            if hits := _hits(json.dumps(records).encode()):
                leaks[f"Prefect API: {kind}"] = hits
        from tasks.adapters.ledger_store import LedgerStore

        ledger = LedgerStore(state).load("sandbox-2p2d", run_id)
        assert ledger is not None and ledger.records
        if hits := _hits(json.dumps(ledger.to_dict(), default=str).encode()):
            leaks["ledger"] = hits
        in_state = _files_with_canary(state)
        assert "sandbox.env" in in_state  # the search does find the canary where it is
        for rel, hits in in_state.items():
            if rel not in SANDBOX_CREDENTIAL_FILES:
                leaks[f"state dir: {rel}"] = hits
        for rel, hits in _files_with_canary(home).items():
            leaks[f"Prefect home: {rel}"] = hits
        assert not leaks, json.dumps(leaks, indent=1)[:6000]
        print(f"\ncanary secret: migrate completed in {migrated_s:.0f} s"
              f"{' (its INCONCLUSIVE gate approved)' if gate else ''}, whole test {time.monotonic() - started:.0f} s; "
              f"the wrong-secret run: {failed['state']['message']}")
    finally:
        for proc in deployed.workers if deployed else []:
            _stop(proc)
        if server is not None:
            _stop(server.process)
        subprocess.run([str(REPO / "scripts" / "sandbox"), "down"], env=env, cwd=REPO, capture_output=True,
                       timeout=300)


# --- the passphrase, without a sandbox --------------------------------------------------------


def _encrypted_key(tmp_path: Path) -> Path:
    from cryptography.hazmat.primitives import serialization as ser
    from cryptography.hazmat.primitives.asymmetric import ed25519

    plain = tmp_path / "plain"
    plain.write_bytes(ed25519.Ed25519PrivateKey.generate().private_bytes(
        ser.Encoding.PEM, ser.PrivateFormat.OpenSSH, ser.NoEncryption()))
    return _encrypted_copy(plain, tmp_path / "encrypted")


def test_an_encrypted_key_is_opened_with_the_passphrase_from_the_variable_the_blueprint_names(tmp_path):
    from blueprints.schema import SshSpec
    from tasks.adapters.ssh_connect import Connector, SshSettings

    key = _encrypted_key(tmp_path)
    spec = SshSpec(user="root", key_pair="k", key_file=str(key), key_passphrase_env=PASSPHRASE_ENV)
    settings = SshSettings.from_spec(spec, environ={PASSPHRASE_ENV: CANARY_PASSPHRASE})
    assert settings.key_passphrase == CANARY_PASSPHRASE and PREFIX not in repr(settings)
    assert Connector(settings)._pkey.get_name() == "ssh-ed25519"


@pytest.mark.parametrize("environ, named, says", [
    ({}, PASSPHRASE_ENV, f"is encrypted: ${PASSPHRASE_ENV} (aws.ssh.key_passphrase_env) is not set"),
    ({PASSPHRASE_ENV: WRONG_SECRET}, PASSPHRASE_ENV, f"(or ${PASSPHRASE_ENV} is not its passphrase)"),
    ({}, None, "is encrypted: name the variable that holds its passphrase in aws.ssh.key_passphrase_env"),
])
def test_a_missing_or_wrong_passphrase_is_a_config_error_that_names_the_variable_not_the_value(
        tmp_path, environ, named, says):
    from blueprints.schema import SshSpec
    from tasks.adapters.ssh_connect import Connector, SshSettings
    from tasks.errors import ConfigError

    spec = SshSpec(user="root", key_pair="k", key_file=str(_encrypted_key(tmp_path)), key_passphrase_env=named)
    with pytest.raises(ConfigError) as info:
        Connector(SshSettings.from_spec(spec, environ=environ))
    assert says in str(info.value) and PREFIX not in str(info.value)
