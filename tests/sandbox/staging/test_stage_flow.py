"""The stage-weights flow on sandbox nodes over SSH: verified copies, artifacts, failures named."""

from __future__ import annotations

import asyncio
import hashlib
import json

import pytest

from tasks.adapters.ssh import NodeShell, SshSettings
from tasks.errors import StageFailed, WeightVerificationFailed
from tests.sandbox.staging.support import NODES, NVME, SMALL_NODE, upload, write_blueprint
from tests.sandbox.staging.safetensors_files import shard

pytestmark = [pytest.mark.sandbox, pytest.mark.usefixtures("prefect_harness")]


def run_flow(blueprint, nodes, **kw):
    from flows.weights import weights_flow

    state = weights_flow(str(blueprint), nodes=[nodes.ssh(i) for i in kw.pop("ids", NODES)], return_state=True, **kw)
    return state, state.state_details.flow_run_id


def logs_and_artifacts(flow_run_id) -> tuple[list[str], list]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (ArtifactFilter, ArtifactFilterFlowRunId, LogFilter,
                                                LogFilterFlowRunId)
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=10)  # logs are shipped in batches; send what is queued first

    async def read():
        async with get_client() as client:
            logs = await client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))
            artifacts = await client.read_artifacts(
                artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])))
            return [log.message for log in logs], artifacts

    return asyncio.run(read())


def source_hashes(s3_sandbox, prefix: str) -> dict[str, str]:
    client = s3_sandbox.client()
    listing = client.list_objects_v2(Bucket=s3_sandbox.bucket, Prefix=prefix)["Contents"]
    return {o["Key"][len(prefix):]: hashlib.sha256(client.get_object(Bucket=s3_sandbox.bucket, Key=o["Key"])
                                                  ["Body"].read()).hexdigest()
            for o in listing if not o["Key"].endswith("pdlift-manifest.json")}


def assert_no_secret(secret: str, *texts: str) -> None:
    """The canary: the sandbox S3 secret key, which every node's stager is given in its environment."""
    for text in texts:
        assert secret not in text


def test_stages_the_model_on_four_nodes_identical_to_the_source(tmp_path, s3_sandbox, s3_env, staging_nodes,
                                                                 monkeypatch):
    monkeypatch.setenv("PDLIFT_STATE_DIR", str(tmp_path / "state"))
    blueprint = write_blueprint(tmp_path / "bp.yaml", staging_nodes, s3_sandbox.model_uri, f"{NVME}/models")
    state, run_id = run_flow(blueprint, staging_nodes, write_manifest=True)
    assert state.is_completed(), state.message
    expected = source_hashes(s3_sandbox, s3_sandbox.prefix)
    assert set(expected) >= set(s3_sandbox.model_files)
    for node in NODES:
        staged = staging_nodes.nvme(node) / "models"
        assert {name: hashlib.sha256((staged / name).read_bytes()).hexdigest() for name in expected} == expected

    logs, artifacts = logs_and_artifacts(run_id)
    progress = {a.key: a.data for a in artifacts if a.type == "progress"}
    assert progress == {**{f"sandbox-2p2d-weights-{n}": 100.0 for n in NODES}, "sandbox-2p2d-weights-total": 100.0}
    (table,) = [a for a in artifacts if a.type == "table"]
    rows = json.loads(table.data)
    assert [r["node"] for r in rows] == NODES + ["total"] and {r["state"] for r in rows} == {"done"}
    assert any("staged tiny-moe-mla/model-00001-of-00004.safetensors" in m for m in logs)
    assert_no_secret(s3_sandbox.secret_key, *logs, *(str(a.data) for a in artifacts))

    again, _ = run_flow(blueprint, staging_nodes)  # verified files are skipped, not fetched again
    assert [p.bytes_fetched for p in again.result().nodes] == [0, 0, 0, 0]
    # Nodes named by hand are not the run's fleet: staging them records nothing for any run.
    assert not (tmp_path / "state" / "runs").exists()


def test_the_cli_stages_with_a_progress_bar_and_prints_the_throughput_table(
        tmp_path, s3_sandbox, s3_env, staging_nodes, capsys):
    from cli.main import main as pdlift

    blueprint = write_blueprint(tmp_path / "bp.yaml", staging_nodes, s3_sandbox.model_uri, f"{NVME}/models")
    nodes_file = tmp_path / "nodes.json"
    nodes_file.write_text(json.dumps([{"name": n, "address": staging_nodes.ssh(n).address,
                                       "host_keys": list(staging_nodes.ssh(n).host_keys)} for n in NODES[:2]]))
    assert pdlift(["stage-weights", str(blueprint), "--nodes", str(nodes_file), "--write-manifest"]) == 0
    out = capsys.readouterr().out
    assert "100.0%" in out and "nodes 2/2 done" in out
    assert all(n in out for n in NODES[:2]) and "total" in out


def test_an_object_corrupted_after_the_manifest_fails_the_stage_naming_node_and_key(
        tmp_path, s3_sandbox, s3_env, s3_proxy, staging_nodes, monkeypatch):
    uri, prefix = upload(s3_sandbox, {"model-00001.safetensors": shard(6, "a"),
                                      "model-00002.safetensors": shard(6, "b")})
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_proxy.endpoint)
    s3_proxy.corrupt_key = prefix + "model-00002.safetensors"  # nodes receive a flipped byte, same ETag
    blueprint = write_blueprint(tmp_path / "bp.yaml", staging_nodes, uri, f"{NVME}/corrupt")
    state, run_id = run_flow(blueprint, staging_nodes, write_manifest=True, ids=NODES[:2])
    assert state.is_failed()
    with pytest.raises(WeightVerificationFailed) as caught:
        state.result()
    message = str(caught.value)
    assert all(f"{n}: {prefix}model-00002.safetensors: checksum-mismatch" in message for n in NODES[:2])
    for node in NODES[:2]:
        staged = staging_nodes.nvme(node) / "corrupt"
        assert not (staged / "model-00002.safetensors").exists()
        assert not list(staged.glob("model-00002.safetensors.pdlift-part*"))
    logs, artifacts = logs_and_artifacts(run_id)
    assert any("checksum-mismatch" in m for m in logs)
    assert_no_secret(s3_sandbox.secret_key, message, *logs, *(str(a.data) for a in artifacts))


def test_a_node_without_room_fails_the_stage_before_anything_is_downloaded(
        tmp_path, s3_sandbox, s3_env, s3_proxy, staging_nodes, monkeypatch):
    uri, _ = upload(s3_sandbox, {"model-00001.safetensors": shard(12, "a"), "model-00002.safetensors": shard(12, "b")})
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_proxy.endpoint)
    blueprint = write_blueprint(tmp_path / "bp.yaml", staging_nodes, uri, f"{NVME}/roomless")
    state, _ = run_flow(blueprint, staging_nodes, write_manifest=True, ids=[NODES[0], SMALL_NODE])
    with pytest.raises(StageFailed, match=rf"before downloading anything:\n  {SMALL_NODE}: needs 0.0\d GB free") as caught:
        state.result()
    assert_no_secret(s3_sandbox.secret_key, str(caught.value))
    assert not (staging_nodes.nvme(NODES[0]) / "roomless").exists()
    settings = SshSettings(user=staging_nodes.user, key_file=str(staging_nodes.key_file), port=staging_nodes.port)
    with NodeShell(settings) as shell:
        listing = shell.run(staging_nodes.ssh(SMALL_NODE), ["ls", "-A", NVME], timeout_s=10).stdout
    assert listing == ""
