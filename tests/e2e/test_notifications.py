"""Notifications end to end: pdlift's automations on a real Prefect server (`prefect server start`,
whose triggers and actions services evaluate them) send a gate FAIL of a real benchmark-gate run
to a webhook on 127.0.0.1; a PASS sends nothing.

The gate runs as an operator's would: the benchmark-gate flow in its own process against that
server, judging a green candidate twice as slow on TPOT as blue's recorded baseline in the
Kubernetes stand-in (tests/sandbox/bench/fixtures.py). The other events are emitted in a process
of their own with the product's own builders (``tasks.planning.notifications``), since one
process's Prefect events client stays bound to the first API it sent to.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tasks.adapters.prefect_automations import ensure_automations, load_spec

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
NAMES = sorted(a["name"] for a in load_spec()["automations"])
BLOCK = load_spec()["block"]["name"]
NOTIFY_S = 60.0      # an event to its notification: the server batches events, checks triggers, runs actions
QUIET_S = 3.0        # after the last expected notification: nothing else may arrive
FLOW_S = 300         # the benchmark-gate flow's process, start to end


class Webhook:
    """A loopback HTTP receiver: every JSON body POSTed to it, in order of arrival."""

    def __init__(self) -> None:
        received, cond = self.received, self.cond = [], threading.Condition()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with cond:
                    received.append(json.loads(body or b"{}"))
                    cond.notify_all()
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/pdlift-{uuid.uuid4().hex}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
        self.thread.start()

    def wait_for(self, what: str, predicate, timeout_s: float = NOTIFY_S) -> dict:
        deadline = time.monotonic() + timeout_s
        with self.cond:
            while True:
                found = [m for m in self.received if predicate(m)]
                if found:
                    return found[0]
                left = deadline - time.monotonic()
                if left <= 0:
                    subjects = [m.get("subject") for m in self.received]
                    raise AssertionError(f"no notification {what} within {timeout_s:.0f} s; received: {subjects}")
                self.cond.wait(min(left, 1.0))

    def matching(self, text: str) -> list[dict]:
        with self.cond:
            return [m for m in self.received if text in json.dumps(m)]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def webhook():
    hook = Webhook()
    yield hook
    hook.close()


@pytest.fixture
def installed(prefect_server, webhook):
    """The automations installed twice (the CLI, then the function); removed afterwards, so later
    tests on this session's server notify no one."""
    env = {**prefect_server.env, "PDLIFT_NOTIFY_WEBHOOK": webhook.url, "PYTHONPATH": str(REPO)}
    cli = subprocess.run([sys.executable, "-m", "cli.notify", "install"], env=env, cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert webhook.url not in cli.stdout + cli.stderr  # the URL may carry a token: never printed
    again = ensure_automations(prefect_server.api, webhook.url)
    yield again
    for aid in again.automations.values():
        prefect_server.http("DELETE", f"/automations/{aid}")
    prefect_server.http("DELETE", f"/block_documents/{again.block_id}")


def _emit_in_a_process_of_its_own(server, events: list[dict]) -> None:
    script = ("import json, sys\n"
              "from prefect.events import emit_event\n"
              "from prefect.events.worker import EventsWorker\n"
              "for kwargs in json.load(sys.stdin):\n"
              "    assert emit_event(**kwargs) is not None\n"
              "EventsWorker.drain_all(timeout=30)\n")
    done = subprocess.run([sys.executable, "-c", script], input=json.dumps(events), env=server.env, cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]


def _events_named(server, name: str, run_id: str, timeout_s: float = 30.0) -> list[dict]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        _, page = server.http("POST", "/events/filter", {"filter": {"event": {"name": [name]}}, "limit": 50})
        mine = [e for e in page.get("events") or [] if e["payload"].get("run_id") == run_id]
        if mine:
            return mine
        time.sleep(0.5)
    return []


def test_a_gate_fail_notifies_the_webhook_naming_verdict_and_blueprint_and_a_pass_does_not(
        prefect_server, webhook, installed, bench_env):
    from tasks.planning import notifications

    # Installing twice left one block and one automation of each name, all pointed at that block.
    _, automations = prefect_server.http("POST", "/automations/filter", {})
    mine = sorted(a["name"] for a in automations if a["name"] in NAMES)
    assert mine == NAMES and set(installed.updated) == set(NAMES) and not installed.created
    assert {a["actions"][0]["block_document_id"] for a in automations if a["name"] in NAMES} == {installed.block_id}
    _, blocks = prefect_server.http("POST", "/block_documents/filter",
                                    {"block_documents": {"name": {"any_": [BLOCK]}}})
    assert [b["id"] for b in blocks] == [installed.block_id]
    assert webhook.url not in json.dumps(blocks)  # kept in the block's secrets: obfuscated

    # The real gate, in its own process against the server: green's TPOT is twice blue's (far past
    # the gate's +10%, so a baseline measured while this server was still starting cannot hide it).
    stacks, bp, run_id = bench_env, bench_env.blueprint, "notify-" + uuid.uuid4().hex[:6]
    stacks.engine_rules("green", latency={"tpot_scale": 2.0})
    env = {**os.environ, **{k: v for k, v in prefect_server.env.items() if k.startswith("PREFECT_")},
           "PYTHONPATH": str(REPO)}  # this test's PDLIFT_STATE_DIR and KUBECONFIG (bench_env), the server's Prefect
    gate = subprocess.run([sys.executable, "-c", "import sys; from flows.benchmark import benchmark_flow; "
                                                 "benchmark_flow(sys.argv[1], sys.argv[2], colour='green')",
                           str(stacks.directory / "bp.yaml"), run_id],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=FLOW_S)
    assert gate.returncode != 0 and "rolled back (gate FAIL" in gate.stderr, gate.stderr[-3000:]

    fail = webhook.wait_for(f"of the FAIL of run {run_id}", lambda m: run_id in m.get("subject", ""))
    assert fail["subject"] == f"pdlift {bp.name}: gate FAIL, run {run_id}"
    assert f"Deployment: {bp.name}" in fail["body"] and "Verdict: FAIL" in fail["body"]
    assert "tpot_mean" in fail["body"]  # why, from the gate's reasons
    assert "not promoted" in fail["body"] and "production is unchanged" not in fail["body"]
    assert f"Link: {prefect_server.ui}/runs/flow-run/" in fail["body"]  # the benchmark-gate flow run
    assert fail["text"].startswith(fail["subject"])

    # A PASS notifies no one. The events behind it do notify, so once theirs have arrived the
    # PASS has been through the triggers too.
    pass_run, later = "pass-" + uuid.uuid4().hex[:6], "later-" + uuid.uuid4().hex[:6]
    from tasks.planning.ledger import LedgerEntry

    _emit_in_a_process_of_its_own(prefect_server, [
        notifications.gate_event(bp.name, "PASS", {"outcome": "PASS", "reasons": [], "run_id": pass_run,
                                                   "colour": "green"}),
        notifications.gate_event(bp.name, "INCONCLUSIVE", {"outcome": "INCONCLUSIVE", "reasons": ["too few"],
                                                           "run_id": later, "colour": "green",
                                                           "undecided": "ask", "approval_timeout_s": 30}),
        notifications.failed_billing_event(bp.name, later, "bp.yaml", "fabric", RuntimeError("no EFA"),
                                           [LedgerEntry("instance", "i-0later", "launch", "us-east-2a", 63.3)],
                                           63.3, {}),
        notifications.sweep_leaks_event("us-east-2", True, [], [{  # a release that failed part way
            "kind": "instance", "resource_id": f"i-{later}", "deployment": bp.name, "run_id": later,
            "created_at": "2020-01-01T00:00:00Z", "ttl_hours": 6}, {
            "kind": "capacity-block", "resource_id": f"cr-{later}", "deployment": bp.name, "run_id": later,
            "created_at": "2020-01-01T00:00:00Z", "ttl_hours": 6}], {f"i-{later}": "failed", f"cr-{later}": "kept"},
            [f"capacity block cr-{later}: cannot be cancelled; it stops billing when it ends"],
            "StageFailed: instances still not terminated"),
    ])
    assert _events_named(prefect_server, "pdlift.gate.pass", pass_run), "the PASS event never reached the server"
    waiting = webhook.wait_for("of the INCONCLUSIVE run", lambda m: "INCONCLUSIVE" in m.get("subject", "")
                               and later in m["subject"])
    assert "waits for approval" in waiting["subject"] and "up to 30 s" in waiting["body"]
    billing = webhook.wait_for("of the failed run still billing", lambda m: "still billing" in m.get("subject", ""))
    assert "$63.30/h" in billing["subject"] and f"pdlift teardown bp.yaml --run-id {later}" in billing["body"]
    leak = webhook.wait_for("of the sweep's leak", lambda m: f"i-{later}" in m.get("body", ""))
    assert leak["subject"] == ("pdlift sweep us-east-2: 2 leaked resource(s): 0 released, "
                               "1 kept (cannot be cancelled), 1 NOT released (the release failed)")
    assert f"- instance i-{later}: NOT released" in leak["body"] and "The release failed: StageFailed" in leak["body"]
    time.sleep(QUIET_S)
    assert webhook.matching(pass_run) == []
    assert len(webhook.matching(run_id)) == 1  # one notification per event
