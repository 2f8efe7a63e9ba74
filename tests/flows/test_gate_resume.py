"""A suspended benchmark-gate run resumes in another process, from another working copy with an
empty state directory, Prefect home and TMPDIR (a new pod), and decides on the measurement the
approver saw: the benchmark and the gate are replayed from the shared state store, nothing is
measured again. The store here is a directory both processes mount (PDLIFT_STATE_URI=/path): the
Kubernetes stand-in accepts only its own test credentials, and the sandbox's S3 only its own, so
one process cannot hold both; the S3 store under the same results is tests/adapters/test_prefect_results.py."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.fixtures.postgres import copy_repo

pytestmark = [pytest.mark.usefixtures("prefect_harness"), pytest.mark.slow, pytest.mark.timeout(900)]


def _api() -> str:
    from prefect.settings import PREFECT_API_URL

    return PREFECT_API_URL.value()


async def _deployment() -> str:
    from prefect.client.orchestration import get_client

    async with get_client() as client:
        flow_id = await client.create_flow_from_name("benchmark-gate")
        # The working copy is a placeholder filled from each process's PDLIFT_REPO, as prefect.yaml's.
        return str(await client.create_deployment(
            flow_id=flow_id, name=f"resume-{uuid.uuid4().hex[:6]}", entrypoint="flows/benchmark.py:benchmark_flow",
            pull_steps=[{"prefect.deployments.steps.set_working_directory": {"directory": "{{ $PDLIFT_REPO }}"}}]))


def _execute(flow_run_id: str, env: dict[str, str], log: Path) -> str:
    """`prefect flow-run execute`, as a process worker runs a flow run; returns what it printed."""
    out = subprocess.run([str(Path(sys.executable).parent / "prefect"), "flow-run", "execute", flow_run_id],
                         env=env, cwd=env["PDLIFT_REPO"], capture_output=True, text=True, timeout=600)
    log.write_text(out.stdout + out.stderr)
    return out.stdout + out.stderr


def _state(flow_run_id: str):
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return client.read_flow_run(uuid.UUID(flow_run_id)).state


def test_a_suspended_gate_resumed_in_a_new_process_and_working_copy_decides_without_measuring_again(
        bench_env, tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.flow_runs import resume_flow_run

    from tasks.adapters.state_store import LocalStore
    from tasks.planning.manifests.common import COLOUR_LABEL

    stacks, run_id = bench_env, "resume-" + uuid.uuid4().hex[:6]
    store = LocalStore(tmp_path / "shared-volume")
    bp = stacks.blueprint
    # blue's promotion left its baseline in the store (bench_env put it in the local state dir)
    store.put(f"baselines/{bp.name}.json", (tmp_path / "state" / "baselines" / f"{bp.name}.json").read_bytes())
    # too few samples: INCONCLUSIVE, and the blueprint has a person decide
    source = stacks.write_blueprint("resume.yaml", gate={"min_samples": 500, "undecided": "ask"})

    def pod(name: str) -> dict[str, str]:
        repo = copy_repo(tmp_path / name / "repo")
        (repo / "blueprints" / "resume.yaml").write_text(source.read_text())
        for d in ("state", "home", "tmp"):
            (tmp_path / name / d).mkdir()
        return {**os.environ, "PREFECT_API_URL": _api(), "PREFECT_HOME": str(tmp_path / name / "home"),
                "PDLIFT_REPO": str(repo), "PYTHONPATH": str(repo), "PDLIFT_STATE_DIR": str(tmp_path / name / "state"),
                "TMPDIR": str(tmp_path / name / "tmp"), "PDLIFT_STATE_URI": store.uri, "DO_NOT_TRACK": "1",
                "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "KUBECONFIG": os.environ["KUBECONFIG"]}

    deployment_id = asyncio.run(_deployment())
    with get_client(sync_client=True) as client:
        flow_run = client.create_flow_run_from_deployment(uuid.UUID(deployment_id), parameters={
            "blueprint_path": "blueprints/resume.yaml", "run_id": run_id, "colour": "green"})
    first = _execute(str(flow_run.id), pod("pod-a"), tmp_path / "pod-a.log")
    suspended = _state(str(flow_run.id))
    assert suspended.type.value == "PAUSED" and suspended.name == "Suspended", first[-3000:]
    assert "load run 1" in first  # pod A measured
    report = store.get(f"runs/{bp.name}/{run_id}/bench/gate.json").data  # what the approver was shown

    resume_flow_run(flow_run.id, run_input={"approve": True, "note": "looks right"})
    deadline = time.monotonic() + 60
    while _state(str(flow_run.id)).type.value == "PAUSED":
        assert time.monotonic() < deadline, "the resumed run was never rescheduled"
        time.sleep(0.5)
    second = _execute(str(flow_run.id), pod("pod-b"), tmp_path / "pod-b.log")
    final = _state(str(flow_run.id))
    assert final.type.value == "COMPLETED", second[-4000:]
    assert "load run" not in second, "the resumed run measured again"
    assert "Cached" in second  # the benchmark and the gate replayed from their persisted results
    assert store.get(f"runs/{bp.name}/{run_id}/bench/gate.json").data == report
    assert stacks.kube.get("v1", "Service", bp.name, bp.name)["spec"]["selector"][COLOUR_LABEL] == "green"
    assert store.keys("results"), "no persisted result in the state store"


def test_a_suspended_gate_whose_approval_times_out_leaves_its_candidate_to_the_sweep_which_deletes_it(
        bench_env, prefect_server, tmp_path, monkeypatch):
    """Prefect's pause-expiration service fails the suspended run with none of its code running
    (so no rollback): the candidate stays up until the sweep, which waits while the run is
    suspended and deletes the candidate, not the live colour, once the run has ended. On a real
    `prefect server start` (the test harness's server runs no such service)."""
    from prefect import flow

    from tasks import teardown
    from tasks.adapters.state_store import LocalStore
    from tasks.planning.manifests.common import COLOUR_LABEL
    from tests.fixtures.prefect_server import using_api

    stacks, run_id = bench_env, "expire-" + uuid.uuid4().hex[:6]
    store = LocalStore(tmp_path / "shared-volume")
    bp = stacks.blueprint
    store.put(f"baselines/{bp.name}.json", (tmp_path / "state" / "baselines" / f"{bp.name}.json").read_bytes())
    source = stacks.write_blueprint("expire.yaml", gate={"min_samples": 500, "undecided": "ask"},
                                    promotion={"approval_timeout_s": 5})
    repo = copy_repo(tmp_path / "pod" / "repo")
    (repo / "blueprints" / "expire.yaml").write_text(source.read_text())
    for d in ("state", "home", "tmp"):
        (tmp_path / "pod" / d).mkdir()
    env = {**os.environ, "PREFECT_API_URL": prefect_server.api, "PREFECT_HOME": str(tmp_path / "pod" / "home"),
           "PDLIFT_REPO": str(repo), "PYTHONPATH": str(repo), "PDLIFT_STATE_DIR": str(tmp_path / "pod" / "state"),
           "TMPDIR": str(tmp_path / "pod" / "tmp"), "PDLIFT_STATE_URI": store.uri, "DO_NOT_TRACK": "1",
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "KUBECONFIG": os.environ["KUBECONFIG"]}
    monkeypatch.setenv("PDLIFT_STATE_URI", store.uri)  # the sweep below reads the same leases and ledgers

    @flow(name="sweep-candidates-test")
    def sweep(apply: bool) -> list[dict]:
        return teardown.sweep_candidates(str(source), apply, [])

    from prefect.client.orchestration import get_client

    with using_api(prefect_server.api):
        deployment_id = asyncio.run(_deployment())
        with get_client(sync_client=True) as client:
            flow_run = client.create_flow_run_from_deployment(uuid.UUID(deployment_id), parameters={
                "blueprint_path": "blueprints/expire.yaml", "run_id": run_id, "colour": "green"})
        out = _execute(str(flow_run.id), env, tmp_path / "pod.log")
        assert _state(str(flow_run.id)).name == "Suspended", out[-3000:]
        (kept,) = sweep(apply=True)
        assert (kept["resource_id"], kept["action"]) == (f"{bp.name}-green", "kept"), kept
        assert run_id in kept["why"] and str(flow_run.id) in kept["why"]  # Paused: it waits for a person
        assert stacks.kube.get("v1", "Namespace", f"{bp.name}-green") is not None

        deadline = time.monotonic() + 90
        while (state := _state(str(flow_run.id))).type.value == "PAUSED":
            assert time.monotonic() < deadline, "Prefect never failed the expired suspension"
            time.sleep(1)
        assert state.type.value == "FAILED" and "never resumed" in (state.message or ""), state
        assert stacks.kube.get("v1", "Namespace", f"{bp.name}-green") is not None  # no code of the run ran

        (report,) = sweep(apply=False)
        assert (report["resource_id"], report["action"]) == (f"{bp.name}-green", "would delete")
        assert "gate was INCONCLUSIVE" in report["why"] and "production routes to blue" in report["why"]
        assert stacks.kube.get("v1", "Namespace", f"{bp.name}-green") is not None  # a dry run deletes nothing
        (report,) = sweep(apply=True)
        assert report["action"].startswith("deleted: ") and f"Namespace {bp.name}-green" in report["action"]
        green = stacks.kube.get("v1", "Namespace", f"{bp.name}-green")
        assert green is None or green["metadata"].get("deletionTimestamp")
        assert stacks.kube.get("v1", "Service", bp.name, bp.name)["spec"]["selector"][COLOUR_LABEL] == "blue"
        assert stacks.kube.get("v1", "Namespace", f"{bp.name}-blue") is not None
