"""kill -9 the worker while weights are staging; restart it and re-run the same run id: the run
completes with one reservation and without downloading verified files again."""

import time

import pytest

from tasks.planning import identity

pytestmark = pytest.mark.slow
RUN_ID = "crashresume1"
PARAMS = {"params": {"blueprint": "blueprints/sandbox-2p2d.yaml", "run_id": RUN_ID,
                     "stages": ["reserve", "launch", "weights"]}}


def _reservations(aws_env) -> list[str]:
    ec2 = aws_env.client("ec2")
    found = ec2.describe_capacity_reservations(Filters=identity.run_filters("sandbox-2p2d", RUN_ID))
    return [r["CapacityReservationId"] for r in found["CapacityReservations"]
            if r["State"] in ("active", "pending")]


def test_killed_worker_during_staging_then_rerun_completes_without_a_second_reservation(
        prefect_deployed, aws_sandbox, sandbox_state_dir):
    server = prefect_deployed.server
    _, first = prefect_deployed.create_run("migrate", "migrate", PARAMS)
    deadline = time.monotonic() + 400
    while sum(_on_disk(sandbox_state_dir)) == 0:  # the first bytes of the weights reach a node
        _, state = server.http("GET", f"/flow_runs/{first['id']}")
        assert state["state_type"] not in ("FAILED", "CRASHED", "COMPLETED"), _logs(server, first["id"])
        assert time.monotonic() < deadline, "weight staging never started"
        time.sleep(0.1)
    for worker in list(prefect_deployed.workers):
        prefect_deployed.kill_worker(worker)
        prefect_deployed.workers.remove(worker)
    # The operator (or Prefect's zombie detection) marks the orphaned run crashed.
    server.http("POST", f"/flow_runs/{first['id']}/set_state",
                {"state": {"type": "CRASHED", "message": "worker killed"}, "force": True})
    assert len(_reservations(aws_sandbox)) == 1
    verified_before, partial_before = _on_disk(sandbox_state_dir)
    assert verified_before + partial_before > 0, "killed before any byte landed: not mid-staging"

    prefect_deployed.start_worker()
    _, second = prefect_deployed.create_run("migrate", "migrate", PARAMS)
    finished = server.wait_terminal(second["id"], timeout_s=600)
    assert finished["state_type"] == "COMPLETED", finished["state"]

    assert len(_reservations(aws_sandbox)) == 1
    from tasks.adapters.ledger_store import LedgerStore

    ledger = LedgerStore(sandbox_state_dir).load("sandbox-2p2d", RUN_ID)
    weights = ledger.records["weights"]
    total = sum(n.bytes_total for n in weights.nodes)
    assert weights.bytes_fetched <= total - verified_before, "verified files were downloaded again"
    assert weights.bytes_fetched < total


def _logs(server, flow_run_id: str) -> str:
    _, logs = server.http("POST", "/logs/filter", {"logs": {"flow_run_id": {"any_": [flow_run_id]}},
                                                   "sort": "TIMESTAMP_ASC", "limit": 200})
    return "\n".join(entry["message"] for entry in logs)[-4000:]


def _on_disk(state_dir) -> tuple[int, int]:
    """(bytes under final names, bytes in partial files) on every sandbox node's NVMe."""
    verified = partial = 0
    for path in (state_dir / "sandbox" / "nodes").glob("*/nvme/models/tiny-moe-mla/*"):
        if path.name.startswith(".") or not path.is_file():
            continue
        if path.name.endswith(".pdlift-partial"):
            partial += path.stat().st_size
        elif not path.name.endswith(".pdlift-parts"):
            verified += path.stat().st_size
    return verified, partial
