"""prefect.yaml's deployments on a real Prefect server with a process worker, driven over REST."""

import uuid

import pytest

pytestmark = pytest.mark.slow


def test_a_rest_created_migrate_run_with_parameters_completes(prefect_deployed):
    status, run = prefect_deployed.create_run("migrate", "migrate",
                                              {"params": {"blueprint": "blueprints/sandbox-2p2d.yaml", "dry_run": True}})
    assert status == 201
    assert run["parameters"]["params"]["dry_run"] is True
    finished = prefect_deployed.server.wait_terminal(run["id"], timeout_s=180)
    assert finished["state_type"] == "COMPLETED", finished["state"]
    _, artifacts = prefect_deployed.server.http(
        "POST", "/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [run["id"]]}}})
    assert any(a["key"] == "plan-sandbox-2p2d" for a in artifacts)


def test_the_same_idempotency_key_twice_gives_one_run(prefect_deployed):
    key = f"rollout-{uuid.uuid4()}"
    params = {"params": {"blueprint": "blueprints/sandbox-2p2d.yaml", "dry_run": True}}
    first_status, first = prefect_deployed.create_run("migrate", "migrate", params, idempotency_key=key)
    second_status, second = prefect_deployed.create_run("migrate", "migrate", params, idempotency_key=key)
    assert (first_status, second_status) == (201, 200)
    assert first["id"] == second["id"]
    prefect_deployed.server.wait_terminal(first["id"], timeout_s=180)


def test_a_bad_parameter_is_refused_by_the_api(prefect_deployed):
    import urllib.error

    with pytest.raises(urllib.error.HTTPError) as info:
        prefect_deployed.create_run("migrate", "migrate", {"params": {"stages": ["reserve", "teleport"]}})
    assert info.value.code in (409, 422)


def test_the_schedules_and_one_run_limits_exist_after_deployment(prefect_deployed):
    server = prefect_deployed.server
    _, sweep = server.http("GET", "/deployments/name/sweep/sweep")
    _, redeploy = server.http("GET", "/deployments/name/redeploy/redeploy")
    assert [s["schedule"]["cron"] for s in sweep["schedules"]] == ["0 * * * *"]
    assert sweep["parameters"] == {"apply": False, "blueprint_paths": ["blueprints/sandbox-2p2d.yaml"]}
    assert [s["schedule"]["cron"] for s in redeploy["schedules"]] == ["0 3 * * 1"]
    for flow, name in (("migrate", "migrate"), ("redeploy", "redeploy"), ("rollout", "rollout"),
                       ("teardown", "teardown"), ("sweep", "sweep")):
        _, dep = server.http("GET", f"/deployments/name/{flow}/{name}")
        limit = dep.get("global_concurrency_limit") or {}
        assert limit.get("limit") == 1 or dep.get("concurrency_limit") == 1, dep
        assert dep["work_pool_name"] == "pdlift"


def test_the_migrate_form_offers_the_stages_and_options(prefect_deployed):
    _, dep = prefect_deployed.server.http("GET", "/deployments/name/migrate/migrate")
    schema = dep["parameter_openapi_schema"]
    params = schema["definitions"]["MigrateParams"]["properties"]
    assert {"blueprint", "run_id", "stages", "skip", "dry_run", "approve_capacity_block_purchase"} <= set(params)


def test_the_status_deployment_publishes_what_runs_and_costs_even_with_no_aws_to_ask(prefect_deployed):
    status, run = prefect_deployed.create_run("status", "status", {"blueprint_path": "blueprints/sandbox-2p2d.yaml"})
    assert status == 201
    finished = prefect_deployed.server.wait_terminal(run["id"], timeout_s=180)
    assert finished["state_type"] == "COMPLETED", finished["state"]
    _, artifacts = prefect_deployed.server.http(
        "POST", "/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [run["id"]]}}})
    (artifact,) = [a for a in artifacts if a["key"] == "status-sandbox-2p2d"]
    assert "Billing now" in artifact["data"] and "pdlift teardown blueprints/sandbox-2p2d.yaml" in artifact["data"]
