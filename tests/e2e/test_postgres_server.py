"""prefect.yaml's deployments on a Prefect server backed by PostgreSQL (a private cluster on
127.0.0.1), with two process workers that each run from their own working copy: a plan-only
migrate run created over REST completes on one of them, and its rows are in PostgreSQL."""

import json
import time

import pytest
import yaml

from tests.fixtures.prefect_server import REPO

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # the first server start runs every migration
# prefect.yaml has no deployment of the plan flow: migrate with dry_run is the plan alone (touches nothing).
PLAN_ONLY = {"params": {"blueprint": "blueprints/sandbox-2p2d.yaml", "dry_run": True}}


def test_a_plan_run_completes_on_one_of_two_workers_of_a_postgres_backed_server(
        postgres, prefect_pg_server, pg_workers, pg_deployment, tmp_path_factory):
    server = prefect_pg_server
    # The server's own tables are in PostgreSQL: migrated, and the deployments written there.
    assert postgres.psql("select count(*) from alembic_version") == "1"
    wanted = {d["name"] for d in yaml.safe_load((REPO / "prefect.yaml").read_text())["deployments"]}
    assert set(postgres.psql("select name from deployment").splitlines()) == wanted
    _, deployments = server.http("POST", "/deployments/filter", {})
    assert {d["name"] for d in deployments} == wanted
    _, migrate = server.http("GET", "/deployments/name/migrate/migrate")
    assert migrate["work_pool_name"] == "pdlift"
    assert "{{ $PDLIFT_REPO }}" in json.dumps(migrate["pull_steps"]), "resolved at deploy time: workers would share it"

    a = pg_workers.start_worker("pg-worker-a")
    b = pg_workers.start_worker("pg-worker-b")
    assert a.repo != b.repo and a.state_dir != b.state_dir and a.home != b.home
    assert not (a.repo / "flows" / "migrate.py").samefile(b.repo / "flows" / "migrate.py")
    assert (a.repo / "prefect.yaml").read_text() == (REPO / "prefect.yaml").read_text()
    pg_workers.wait_online(a, b)

    t0 = time.monotonic()
    status, run = pg_workers.create_run("migrate", "migrate", PLAN_ONLY)
    assert status == 201
    finished = server.wait_terminal(run["id"], timeout_s=300)
    run_s = time.monotonic() - t0
    assert finished["state_type"] == "COMPLETED", finished["state"]
    _, artifacts = server.http("POST", "/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [run["id"]]}}})
    assert any(a["key"] == "plan-sandbox-2p2d" for a in artifacts)

    ran_on = pg_workers.worker_for(run["id"])  # both may race for it; the server lets one have it
    assert len(ran_on) == 1, [w.log()[-1500:] for w in pg_workers.workers]
    assert f"Flow run '{finished['name']}' - Deployment step 'set_working_directory' completed" in ran_on[0].log()
    assert postgres.rows(f"select state_type, deployment_id::text from flow_run where id = '{run['id']}'") == [
        ["COMPLETED", migrate["id"]]]
    flow_runs = int(postgres.psql("select count(*) from flow_run"))
    assert flow_runs >= 1

    timings = {"postgres_initdb_s": round(postgres.initdb_s, 2), "postgres_pg_ctl_start_s": round(postgres.start_s, 2),
               "postgres_startup_s": round(postgres.startup_s, 2),
               "prefect_server_startup_s": round(server.startup_s, 2),
               "deploy_all_s": round(pg_deployment["deploy_s"], 2), "plan_run_s": round(run_s, 2),
               "plan_run_worker": ran_on[0].name,
               "workers_that_tried": [w.name for w in pg_workers.tried(run["id"])], "flow_run_rows": flow_runs,
               "postgres_port": postgres.port}
    out = tmp_path_factory.getbasetemp() / "postgres-timings.json"
    out.write_text(json.dumps(timings, indent=2))
    print(f"\nPrefect on PostgreSQL timings ({out}): {json.dumps(timings)}")
