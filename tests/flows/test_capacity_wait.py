"""Before the launch, a run whose Capacity Block begins later waits without holding a worker: a
deployment's flow run is set to Scheduled (AwaitingCapacity) at the block's start and its process
leaves, on the real Prefect API (``prefect_test_harness``); a run without a deployment waits in its
own process until the start. Both publish when they resume and what it costs."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from pathlib import Path

import pytest
from prefect import flow

from blueprints.loader import load_blueprint
from flows import pipeline
from tasks.adapters.ledger_store import LedgerStore
from tasks.planning.ledger import LedgerEntry, now_str
from tasks.planning.records import Reserved
from tasks.runs import open_run

pytestmark = pytest.mark.usefixtures("prefect_harness")

ROOT = Path(__file__).resolve().parents[2]
BLUEPRINT = str(ROOT / "blueprints" / "sandbox-2p2d.yaml")


def _run(state_dir: str, run_id: str):
    return open_run(load_blueprint(BLUEPRINT), BLUEPRINT, run_id, LedgerStore(Path(state_dir)))


@flow(name="capacity-wait-probe")
def waits_then_launches(state_dir: str, run_id: str) -> str:
    pipeline.wait_for_capacity(_run(state_dir, run_id))
    return "launched"


def _reserved_block(state_dir: Path, run_id: str, starts: dt.datetime) -> None:
    run = _run(str(state_dir), run_id)
    run.record(LedgerEntry("capacity-block", "cr-0123456789abcdef0", "reserve", "us-east-2a", 0.0, 4152.96,
                           now_str(dt.datetime.now(dt.timezone.utc))))
    run.finish_stage(Reserved("cr-0123456789abcdef0", "us-east-2a", None, True, (), False, now_str(starts),
                              now_str(starts + dt.timedelta(days=1))))


async def _artifact(key: str, run_id: str) -> str:
    """The newest artifact ``key`` about run ``run_id`` ("" if none): every run of the blueprint
    shares the key, so the newest one alone could be another test's run."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.client.schemas.sorting import ArtifactSort

    async with get_client() as client:
        found = await client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])),
                                            sort=ArtifactSort.CREATED_DESC)
    return next((a.data for a in found if f"Run {run_id} of" in (a.data or "")), "")


def test_a_deployments_run_is_rescheduled_for_the_blocks_start_and_frees_its_process(tmp_path, monkeypatch):
    from prefect.client.orchestration import get_client
    from prefect.exceptions import Pause
    from prefect.flow_engine import run_flow

    monkeypatch.setenv("PDLIFT_STATE_DIR", str(tmp_path))
    starts = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=3)).replace(microsecond=0)
    _reserved_block(tmp_path, "cw1", starts)
    params = {"state_dir": str(tmp_path), "run_id": "cw1"}

    async def flow_run_of_a_deployment():
        async with get_client() as client:
            flow_id = await client.create_flow_from_name("capacity-wait-probe")
            entrypoint = "tests/flows/test_capacity_wait.py:waits_then_launches"
            deployment = await client.create_deployment(flow_id=flow_id, name="cw", entrypoint=entrypoint)
            return await client.create_flow_run_from_deployment(deployment, parameters=params)

    flow_run = asyncio.run(flow_run_of_a_deployment())
    began = time.monotonic()
    with pytest.raises(Pause):  # the engine exits the worker's process on it (exit 0), as for a suspend
        run_flow(waits_then_launches, flow_run=flow_run, parameters=params)
    left_after = time.monotonic() - began

    with get_client(sync_client=True) as client:
        state = client.read_flow_run(flow_run.id).state
    assert state.is_scheduled() and state.name == pipeline.AWAITING_CAPACITY
    assert state.state_details.scheduled_time == starts
    assert "cr-0123456789abcdef0" in state.message
    assert left_after < 30  # it did not sit out the three hours
    note = asyncio.run(_artifact("capacity-wait-sandbox-2p2d", "cw1"))
    assert f"resumes at {now_str(starts)}: this flow run is rescheduled" in note and "$4,152.96 paid upfront" in note


def test_a_run_without_a_deployment_waits_in_its_own_process_until_the_start(tmp_path, monkeypatch):
    monkeypatch.setenv("PDLIFT_STATE_DIR", str(tmp_path))
    # 8 s ahead: with 2 s, a worker at scripts/test's lowest priority reached the check after the
    # start, so the run rightly did not wait (and published no note)
    starts = dt.datetime.now(dt.timezone.utc).replace(microsecond=0) + dt.timedelta(seconds=8)
    _reserved_block(tmp_path, "cw2", starts)
    assert waits_then_launches(str(tmp_path), "cw2") == "launched"
    assert dt.datetime.now(dt.timezone.utc) >= starts
    assert "waits in its own process" in asyncio.run(_artifact("capacity-wait-sandbox-2p2d", "cw2"))


def test_a_block_that_has_begun_is_no_wait(tmp_path, monkeypatch):
    monkeypatch.setenv("PDLIFT_STATE_DIR", str(tmp_path))
    _reserved_block(tmp_path, "cw3", dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=1))
    began = time.monotonic()
    assert waits_then_launches(str(tmp_path), "cw3") == "launched"
    assert time.monotonic() - began < 10
