"""`pdlift state show` and `pdlift state migrate` against a local store and the sandbox's S3."""

from __future__ import annotations

import json
import uuid

import pytest

from cli.main import main
from tasks.adapters.ledger_store import LedgerStore
from tasks.adapters.state_store import LocalStore, S3Store
from tasks.planning.ledger import Ledger, LedgerEntry

BLUEPRINT = "blueprints/sandbox-2p2d.yaml"


@pytest.fixture
def local_state(tmp_path, monkeypatch):
    monkeypatch.setenv("PDLIFT_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("PDLIFT_STATE_URI", raising=False)
    store = LocalStore(tmp_path / "state")
    ledger = Ledger("sandbox-2p2d", "r1", "2026-12-02T00:00:00Z").with_entry(
        LedgerEntry("capacity-reservation", "cr-0123", "reserve", "us-east-2a", usd_per_hour=63.0, started_at="2026-12-02T00:00:00Z"))
    LedgerStore(store).save(ledger)
    store.put("runs/sandbox-2p2d/r1/bench/results.json", b'{"scenarios": []}')
    store.put("baselines/sandbox-2p2d.json", b'{"baseline": 1}')
    store.put("leases/sandbox-2p2d/r1.json", json.dumps({
        "kind": "pdlift-run-lease", "deployment": "sandbox-2p2d", "run_id": "r1", "flow_run_id": "f-1",
        "worker": "host:1", "expires_at": "2999-01-01T00:00:00Z", "taken_at": "2026-12-02T00:00:00Z"}).encode())
    return store


def test_show_lists_the_runs_and_one_runs_records(local_state, capsys):
    assert main(["state", "show", BLUEPRINT]) == 0
    out = capsys.readouterr().out
    assert f"state store: {local_state.uri}" in out and "r1: started 2026-12-02T00:00:00Z" in out
    assert "1 resource(s) billing $63.00/h; held until 2999-01-01T00:00:00Z by host:1" in out
    assert main(["state", "show", BLUEPRINT, "--run", "r1"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["run_id"] == "r1" and shown["resources"][0]["resource_id"] == "cr-0123"
    assert shown["files"] == ["runs/sandbox-2p2d/r1/bench/results.json"]
    assert main(["state", "show", BLUEPRINT, "--run", "nope"]) == 1
    assert "run nope of sandbox-2p2d has no ledger" in capsys.readouterr().err


def test_migrate_needs_an_s3_store(local_state, capsys):
    assert main(["state", "migrate", BLUEPRINT]) == 2
    assert "--to s3://bucket/prefix" in capsys.readouterr().err


def test_migrate_copies_runs_and_baselines_not_leases_and_never_overwrites(local_state, s3_sandbox, monkeypatch,
                                                                           capsys):
    from sandbox.s3 import ensure_bucket

    for k, v in s3_sandbox.env().items():
        monkeypatch.setenv(k, v)
    s3 = s3_sandbox.client()
    ensure_bucket(s3, "pdlift-state")
    uri = f"s3://pdlift-state/m-{uuid.uuid4().hex[:8]}"
    target = S3Store(uri, s3)
    target.put("baselines/sandbox-2p2d.json", b'{"baseline": "newer, from a worker"}')
    assert main(["state", "migrate", BLUEPRINT, "--to", uri]) == 0
    out = capsys.readouterr().out
    assert "2 copied, 0 already there, 1 kept" in out
    assert target.keys() == ["baselines/sandbox-2p2d.json", "runs/sandbox-2p2d/r1.json",
                             "runs/sandbox-2p2d/r1/bench/results.json"]
    assert target.get("baselines/sandbox-2p2d.json").data == b'{"baseline": "newer, from a worker"}'
    assert LedgerStore(target).load("sandbox-2p2d", "r1").entries[0].resource_id == "cr-0123"
    assert main(["state", "migrate", BLUEPRINT, "--to", uri]) == 0
    assert "0 copied, 2 already there, 1 kept" in capsys.readouterr().out
