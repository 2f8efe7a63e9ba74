"""The stage 1-2 flows end to end on the sandbox, as `pdlift reserve/launch/teardown` run them."""

import re
from pathlib import Path

import pytest

from tasks.adapters.ledger_store import LedgerStore
from tests.fixtures.artifacts import progress_artifacts
from tests.sandbox.stages.conftest import ROOT, tagged

BLUEPRINT = str(ROOT / "blueprints" / "sandbox-2p2d.yaml")


@pytest.mark.usefixtures("prefect_harness")
def test_reserve_launch_teardown_flows_leave_nothing_and_publish_the_cost_ledger(sandbox_stack, aws_env, tmp_path):
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.client.schemas.sorting import ArtifactSort

    from flows.launch import launch_flow
    from flows.reserve import reserve_flow
    from flows.teardown import teardown_flow

    sandbox_stack.require("kube")
    reserved = reserve_flow(BLUEPRINT, "flowrun1")
    assert reserved.reservation_id.startswith("cr-") and not reserved.adopted
    again = reserve_flow(BLUEPRINT, "flowrun1")
    assert again.adopted and again.reservation_id == reserved.reservation_id
    launched = launch_flow(BLUEPRINT, "flowrun1", return_state=True)
    fleet = launched.result()
    assert sorted(n.role for n in fleet.nodes) == ["decode", "decode", "prefill", "prefill"]
    progress = progress_artifacts(flow_run_id=launched.state_details.flow_run_id)
    assert {key: pct for key, (pct, _) in progress.items()} == {
        "sandbox-2p2d-launch-running": 100.0, "sandbox-2p2d-launch-joined": 100.0, "sandbox-2p2d-launch-total": 100.0}
    assert progress["sandbox-2p2d-launch-joined"][1] == "launch joined: 4 of 4 instances joined to the cluster"
    assert len(tagged(aws_env, "sandbox-2p2d")["instances"]) == 4
    # Each stage flow run alone records its own result in the run's ledger, as under migrate.
    ledger = LedgerStore().load("sandbox-2p2d", "flowrun1")
    assert ledger.stages_done == ("reserve", "launch")
    assert ledger.reserved() == again and ledger.fleet() == fleet

    # Torn down from an older copy of the blueprint, its image by tag (refused by a rule added since,
    # which concerns what runs): it still names the fleet, and everything is released.
    older = tmp_path / "sandbox-2p2d.yaml"
    older.write_text(re.sub(r"(\n  image: [^@\n]+)@sha256:[0-9a-f]{64}", r"\1:v0.22.0", Path(BLUEPRINT).read_text()))
    assert ":v0.22.0" in older.read_text()
    released = teardown_flow(str(older), None)
    assert any("capacity-reservation" in line for line in released)
    assert tagged(aws_env, "sandbox-2p2d") == {}
    assert teardown_flow(BLUEPRINT, None) == ["nothing to release"]
    ledger = LedgerStore().load("sandbox-2p2d", "flowrun1")
    assert ledger.records["teardown"].released == len(released) and not ledger.live()

    async def ledger_artifact():
        async with get_client() as client:
            return await client.read_artifacts(
                artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["cost-ledger-sandbox-2p2d"])),
                sort=ArtifactSort.CREATED_DESC)

    final = [a.data for a in asyncio.run(ledger_artifact())]  # newest first: teardown's
    assert final and "| instance |" in final[0], "teardown published no final cost ledger"
    assert "| capacity-reservation |" in final[0] and "Still billing: $0.00/h" in final[0]


@pytest.mark.usefixtures("prefect_harness")
def test_the_reserve_stage_asks_again_after_the_blueprints_delays_when_no_az_has_capacity(aws_env, tmp_path):
    import yaml

    from flows.reserve import reserve_flow

    def blueprint(delays) -> str:
        doc = yaml.safe_load(Path(BLUEPRINT).read_text())
        doc["aws"]["capacity"]["retry_delays_s"] = delays
        path = tmp_path / f"retry-{len(delays)}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return str(path)

    # Both AZs short once (two CreateCapacityReservation calls): the second attempt, a second later, gets it.
    aws_env.admin.inject(action="CreateCapacityReservation", code="InsufficientInstanceCapacity", times=2)
    reserved = reserve_flow(blueprint([1]), "retry1")
    assert reserved.reservation_id.startswith("cr-")
    # With no retry configured, the same shortfall fails the stage, and nothing is reserved.
    aws_env.admin.inject(action="CreateCapacityReservation", code="InsufficientInstanceCapacity", times=2)
    state = reserve_flow(blueprint([]), "retry0", return_state=True)
    assert state.is_failed()
    assert "InsufficientInstanceCapacity" in str(state.message) or "capacity" in str(state.message).lower()
    assert [e for e in LedgerStore().load("sandbox-2p2d", "retry0").live() if e.kind == "capacity-reservation"] == []
