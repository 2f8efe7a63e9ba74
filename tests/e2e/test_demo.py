"""`scripts/demo` as a new operator runs it: a short header naming the log, a line per step and per
stage, then the summary; `pdlift status` on the account before (nothing) and after (the fleet).

It runs on a sandbox of its own (its own state directory, node addresses and SSH port, so no
other test's sandbox is touched) and stops everything with `scripts/demo --down`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
from pathlib import Path

import httpx
import pytest
import yaml

from sandbox.s3 import free_port
from tests.fixtures import loopback
from tests.fixtures.blueprints import quick_gate

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]
REPO = Path(__file__).resolve().parents[2]
STAGES = ("reserve", "launch", "fabric", "weights", "deploy", "benchmark+gate")
MAX_LINES_BEFORE_SUMMARY = 40


def _blueprint(tmp_path: Path) -> tuple[Path, str, int]:
    doc = yaml.safe_load((REPO / "blueprints" / "sandbox-2p2d.yaml").read_text())
    base, port = loopback.node_base(), free_port()
    doc["sandbox"].update({"node_address_base": base, "ssh_port": port, "model_size_mb": 64})
    doc["aws"]["ssh"]["port"] = port
    # What the demo prints and leaves, not its gate: one short point and wide margins, so a busy
    # machine does not suspend the run for a person (tests/fixtures/blueprints.py).
    quick_gate(doc)
    path = tmp_path / "demo-2p2d.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path, base, port


def _sandbox_env(state: Path) -> dict[str, str]:
    env = {}
    for line in (state / "sandbox.env").read_text().splitlines():
        if line.startswith("export ") and "=" in line:
            key, value = line[len("export "):].split("=", 1)
            env[key] = value.strip().strip("'\"")
    return env


def _status(bp: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(REPO / ".venv" / "bin" / "pdlift"), "status", str(bp), *extra], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=120)


APPROVAL = re.compile(r"waiting for your approval \(INCONCLUSIVE gate\): approve or reject at \S+/runs/flow-run/(\S+)")


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
                answers.append(httpx.post(
                    f"http://127.0.0.1:{port}/api/flow_runs/{asked.group(1)}/resume",
                    json={"run_input": {"approve": True, "note": "approved by the demo's test"}}, timeout=60).json())

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
    assert all(answer["status"] == "ACCEPT" for answer in answers), answers
    return proc.returncode, "".join(printed), "".join(errors), bool(answers)


def test_the_demo_is_quiet_names_its_log_and_status_shows_the_fleet_it_made(tmp_path):
    state = tmp_path / "state"
    bp, _, _ = _blueprint(tmp_path)
    port = free_port()
    env = {**os.environ, "PDLIFT_STATE_DIR": str(state), "PDLIFT_PREFECT_PORT": str(port),
           "DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    try:
        # An empty account first: the sandbox up, nothing of this deployment in it.
        up = subprocess.run([str(REPO / "scripts" / "sandbox"), "up", "--blueprint", str(bp)], env=env, cwd=REPO,
                            capture_output=True, text=True, timeout=300)
        assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-3000:]
        status_env = {**env, **_sandbox_env(state)}
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
    finally:
        subprocess.run([str(REPO / "scripts" / "demo"), "--down"], env=env, cwd=REPO, capture_output=True,
                       timeout=300)


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
