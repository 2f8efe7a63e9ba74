"""The on-node stager, run as a node runs it (system python3, stdlib only) against the sandbox S3."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tasks.adapters.s3 import WeightStore, manifest_for, write_hash_file
from tests.sandbox.staging.support import ROOT, sha256, upload
from tests.sandbox.staging.safetensors_files import shard

pytestmark = pytest.mark.sandbox

STAGER = ROOT / "scripts" / "node" / "stage_weights.py"
PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable


def make_model(s3_sandbox, files: dict[str, bytes]):
    uri, prefix = upload(s3_sandbox, files)
    store = WeightStore(s3_sandbox.client())
    write_hash_file(store, uri)
    return manifest_for(store, uri), prefix


def node_env(s3_sandbox, endpoint: str) -> dict[str, str]:
    """Only what a node's SSH session gets: no inherited AWS_* from the test process."""
    return {"PATH": os.environ["PATH"], "AWS_ENDPOINT_URL_S3": endpoint, "AWS_REGION": s3_sandbox.region,
            "AWS_ACCESS_KEY_ID": s3_sandbox.access_key, "AWS_SECRET_ACCESS_KEY": s3_sandbox.secret_key,
            "AWS_EC2_METADATA_DISABLED": "true"}


def start(dest: Path, manifest_json: str, env: dict, *extra: str, mode: str = "stage") -> subprocess.Popen:
    proc = subprocess.Popen([PYTHON, str(STAGER), mode, "--dest", str(dest), "--manifest", "-",
                             "--concurrency", "4", "--part-size-mb", "1", "--progress-interval", "0.05",
                             "--max-retries", "8", *extra],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            text=True)
    proc.stdin.write(manifest_json)
    proc.stdin.close()
    proc.stdin = None  # already sent: communicate() must not touch it
    return proc


def run(dest: Path, manifest_json: str, env: dict, *extra: str, mode: str = "stage") -> tuple[int, list[dict]]:
    proc = start(dest, manifest_json, env, *extra, mode=mode)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def assert_staged(dest: Path, manifest) -> None:
    for e in manifest.entries:
        assert sha256((dest / e.path).read_bytes()) == e.sha256, e.path
    assert not [p for p in dest.rglob("*.pdlift-part*")], "partial files left behind"


@pytest.fixture(scope="module")
def model(s3_sandbox):
    return make_model(s3_sandbox, {"model-00001.safetensors": shard(10, "a"), "model-00002.safetensors": shard(10, "b"),
                                   "nested/config.json": b'{"layers": 78}', "empty.txt": b""})


def test_stages_every_file_verified_and_a_rerun_fetches_nothing(tmp_path, s3_sandbox, model):
    manifest, _ = model
    env = node_env(s3_sandbox, s3_sandbox.endpoint)
    code, events = run(tmp_path, manifest.to_json(), env)
    assert code == 0, events
    assert_staged(tmp_path, manifest)
    assert events[-1]["event"] == "done" and events[-1]["bytes_fetched"] == manifest.total_bytes
    code, events = run(tmp_path, manifest.to_json(), env)
    assert code == 0 and events[-1]["bytes_fetched"] == 0 and events[-1]["files_done"] == 4
    code, events = run(tmp_path, manifest.to_json(), env, mode="probe")
    assert (events[0]["needed_bytes"], events[0]["present_bytes"]) == (0, manifest.total_bytes)


def test_a_killed_stager_resumes_by_range_fetching_under_a_tenth_of_the_model_again(tmp_path, s3_sandbox,
                                                                                   s3_proxy):
    manifest, _ = make_model(s3_sandbox, {"a.bin": os.urandom(12 << 20), "b.bin": os.urandom(12 << 20)})
    env = node_env(s3_sandbox, s3_proxy.endpoint)
    s3_proxy.stall_after_gets = 22  # of 24 one-MiB parts: the last two never arrive
    proc = start(tmp_path, manifest.to_json(), env)
    deadline = time.monotonic() + 30
    try:
        for line in proc.stdout:
            event = json.loads(line)
            if event["event"] == "progress" and event["bytes_done"] >= 0.9 * event["bytes_total"]:
                break
            assert event["event"] not in ("done", "error") and time.monotonic() < deadline, event
    finally:
        proc.kill()
        proc.wait(10)
    for e in manifest.entries:  # a kill leaves nothing unverified under a final name
        final = tmp_path / e.path
        assert not final.exists() or sha256(final.read_bytes()) == e.sha256
    assert list(tmp_path.glob("*.pdlift-partial")), "nothing partial was left to resume"

    s3_proxy.stall_after_gets = None
    code, events = run(tmp_path, manifest.to_json(), env)
    assert code == 0, events
    assert 0 < events[-1]["bytes_fetched"] < 0.10 * manifest.total_bytes
    assert_staged(tmp_path, manifest)


def test_s3_answering_slowdown_for_a_while_is_retried_and_staging_completes(tmp_path, s3_sandbox, s3_proxy, model):
    manifest, _ = model
    s3_proxy.slowdown_for_s = 1.5  # from the stager's first request, however late it starts
    code, events = run(tmp_path, manifest.to_json(), node_env(s3_sandbox, s3_proxy.endpoint))
    assert code == 0, events
    assert s3_proxy.counts["slowdowns"] > 0 and events[-1]["retries"] > 0
    assert_staged(tmp_path, manifest)


def test_an_object_replaced_in_s3_after_the_manifest_fails_naming_the_key(tmp_path, s3_sandbox):
    manifest, prefix = make_model(s3_sandbox, {"a.safetensors": shard(2, "a"), "b.safetensors": shard(2, "b")})
    s3_sandbox.client().put_object(Bucket=s3_sandbox.bucket, Key=prefix + "b.safetensors", Body=shard(2, "b"))
    code, events = run(tmp_path, manifest.to_json(), node_env(s3_sandbox, s3_sandbox.endpoint))
    assert code == 4
    errors = [e for e in events if e["event"] == "error"]
    assert errors[0]["key"] == prefix + "b.safetensors" and errors[0]["reason"] == "changed-in-s3"
    assert not (tmp_path / "b.safetensors").exists()
    assert not list(tmp_path.rglob("b.safetensors.pdlift-part*"))


def test_bytes_that_do_not_match_the_manifest_checksum_never_reach_a_final_name(tmp_path, s3_sandbox,
                                                                                s3_proxy, model):
    manifest, prefix = model
    s3_proxy.corrupt_key = prefix + "model-00002.safetensors"  # served with the same ETag
    code, events = run(tmp_path, manifest.to_json(), node_env(s3_sandbox, s3_proxy.endpoint), "--open-files", "1")
    assert code == 4, events
    (error,) = [e for e in events if e["event"] == "error"]
    assert error["key"] == s3_proxy.corrupt_key and error["reason"] == "checksum-mismatch"
    assert not (tmp_path / "model-00002.safetensors").exists()
    assert not list(tmp_path.rglob("model-00002.safetensors.pdlift-part*"))


def test_not_enough_disk_is_refused_before_a_single_request(tmp_path, s3_sandbox, s3_proxy, model):
    manifest, _ = model
    doc = json.loads(manifest.to_json())
    doc["objects"][0]["size"] = shutil.disk_usage(tmp_path).free * 2
    code, events = run(tmp_path / "dest", json.dumps(doc), node_env(s3_sandbox, s3_proxy.endpoint))
    assert code == 3
    assert events[0]["reason"] == "insufficient-space" and "needs" in events[0]["detail"]
    assert s3_proxy.counts["requests"] == 0
    assert not (tmp_path / "dest").exists()


def test_the_stager_output_never_carries_the_credentials(tmp_path, s3_sandbox, s3_proxy, model):
    manifest, _ = model
    env = node_env(s3_sandbox, s3_proxy.endpoint)
    s3_proxy.slowdown_until = time.monotonic() + 60  # errors all the way, with few retries
    proc = start(tmp_path, manifest.to_json(), env, "--max-retries", "1")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 5
    assert "SlowDown" in out
    assert s3_sandbox.secret_key not in out + err


def test_a_second_stager_on_the_same_directory_is_refused(tmp_path, s3_sandbox, model):
    manifest, _ = model
    with open(tmp_path / ".pdlift-staging.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        code, events = run(tmp_path, manifest.to_json(), node_env(s3_sandbox, s3_sandbox.endpoint))
    assert code == 7 and events[0]["reason"] == "busy"
    assert not list(tmp_path.glob("*.safetensors*"))
