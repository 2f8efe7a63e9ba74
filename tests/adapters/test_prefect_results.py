"""Prefect results persisted in the S3 state store: a task cached in one process is replayed in
another with its own Prefect home, working directory and TMPDIR (another pod), without running."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("prefect_harness")
REPO = Path(__file__).resolve().parents[2]
SCRIPT = '''
import json, sys
from prefect import flow, task
from tasks.adapters.prefect_results import StateStoreResults
from tasks.adapters.s3 import s3_client
from tasks.adapters.state_store import S3Store

ran = []

@task(persist_result=True, cache_key_fn=lambda *_: "pdlift-test-" + sys.argv[2])
def measure():
    ran.append(1)
    return {"measured_by": sys.argv[3]}

@flow
def replay():
    return measure.with_options(result_storage=StateStoreResults.over(S3Store(sys.argv[1], s3_client())))()

out = {"result": replay(), "ran": len(ran)}
if len(sys.argv) > 4:  # as Prefect does from a result record: the saved block loaded by name, alone
    from prefect.blocks.core import Block
    block = Block.load("pdlift-state-store-results/" + sys.argv[4])
    keys = block._the_store().keys("results")
    out.update(uri=block.uri, read=len(block.read_path(keys[0][len("results/"):])))
print("RESULT " + json.dumps(out))
'''


def _pod(tmp_path: Path, name: str, s3_env: dict, *args: str) -> dict:
    from prefect.settings import PREFECT_API_URL

    home = tmp_path / name
    for d in ("home", "cwd", "tmp"):
        (home / d).mkdir(parents=True)
    (home / "replay.py").write_text(SCRIPT)
    env = {**os.environ, **s3_env, "PREFECT_API_URL": PREFECT_API_URL.value(), "PREFECT_HOME": str(home / "home"),
           "TMPDIR": str(home / "tmp"), "PYTHONPATH": str(REPO), "DO_NOT_TRACK": "1"}
    out = subprocess.run([sys.executable, str(home / "replay.py"), *args], env=env, cwd=home / "cwd",
                         capture_output=True, text=True, timeout=180)
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    assert line, out.stdout[-2000:] + out.stderr[-3000:]
    return json.loads(line[0].removeprefix("RESULT "))


def test_a_result_persisted_in_the_s3_store_is_replayed_by_another_process_without_running(s3_sandbox, tmp_path):
    from sandbox.s3 import ensure_bucket
    from tasks.adapters.state_store import S3Store

    s3 = s3_sandbox.client()
    ensure_bucket(s3, "pdlift-state")
    uri, key = f"s3://pdlift-state/r-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex[:8]
    first = _pod(tmp_path, "pod-a", s3_sandbox.env(), uri, key, "pod-a")
    assert first == {"result": {"measured_by": "pod-a"}, "ran": 1}
    assert S3Store(uri, s3).keys("results"), "nothing persisted under results/"
    name = "pdlift-results-" + hashlib.sha256(uri.encode()).hexdigest()[:12]
    second = _pod(tmp_path, "pod-b", s3_sandbox.env(), uri, key, "pod-b", name)
    assert (second["result"], second["ran"]) == ({"measured_by": "pod-a"}, 0)
    assert second["uri"] == uri and second["read"] > 0  # the block as the server has it reads them too
    other_key = _pod(tmp_path, "pod-c", s3_sandbox.env(), uri, key + "x", "pod-c")
    assert other_key == {"result": {"measured_by": "pod-c"}, "ran": 1}  # another key: measured
