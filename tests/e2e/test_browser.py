"""A person's path through the Prefect UI: fill the migrate form, start it, see it complete with
its artifacts. Headless Debian Chromium driven by playwright-core, loopback only.

The Prefect server is the one on PostgreSQL (tests/fixtures/postgres.py), as a team's would be.
On SQLite the form's POST once came back 503 (Prefect's answer to SQLITE_BUSY_SNAPSHOT, when
another writer, a worker's poll or the event persister, commits inside its transaction): the
Python client retries it, the UI does not, so the form started no run."""

import json
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.timing import timing

# Alone, the test pays for its whole stack: PostgreSQL, the server's migrations, `prefect deploy`,
# a working copy for its worker (tests/fixtures/postgres.py allows the server 400 s to start).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
HERE = Path(__file__).resolve().parent / "browser"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


@timing
def test_the_migrate_form_in_the_ui_starts_a_run_that_completes_with_its_artifacts(
        prefect_pg_server, pg_workers, sandbox_env, tmp_path):
    assert shutil.which("node") and Path("/usr/bin/chromium").exists(), "scripts/setup installs node and chromium"
    assert (HERE / "node_modules" / "playwright-core").exists(), "scripts/setup runs npm install in tests/e2e/browser"
    ARTIFACTS.mkdir(exist_ok=True)
    screenshot = ARTIFACTS / "migrate-form-run.png"
    run_name = f"browser-{uuid.uuid4().hex[:8]}"
    worker = pg_workers.start_worker("ui", base_env={**prefect_pg_server.env, **sandbox_env},
                                     extra_env={"TMPDIR": str(tmp_path)})
    pg_workers.wait_online(worker)
    deployment_id = pg_workers.deployment_id("migrate", "migrate")
    out = subprocess.run(["node", "migrate_form.mjs", prefect_pg_server.ui, deployment_id, run_name,
                          str(screenshot)], cwd=HERE, capture_output=True, text=True, timeout=420)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    flow_run_id = json.loads(out.stdout.strip().splitlines()[-1])["flow_run_id"]
    print(out.stderr)  # when each step was done (seconds from the browser's start)

    _, run = prefect_pg_server.http("GET", f"/flow_runs/{flow_run_id}")
    assert run["name"] == run_name and run["state_type"] == "COMPLETED"
    assert run["parameters"]["params"]["dry_run"] is True  # what the form's switch sent
    _, artifacts = prefect_pg_server.http(
        "POST", "/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [flow_run_id]}}})
    assert [a["key"] for a in artifacts] == ["plan-sandbox-2p2d"]
    assert screenshot.stat().st_size > 20_000  # a rendered page, not a blank one
