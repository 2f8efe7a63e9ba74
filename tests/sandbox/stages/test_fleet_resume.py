"""A fleet update cut off after production moved to its second fleet: the next run of the same
run id, whatever strategy it asks for, releases the first fleet (its reservation included), and
later updates of that run id go to the run that holds the fleet now."""

import pytest

from tasks.adapters.ledger_store import LedgerStore
from tasks.planning.records import Handover
from tests.sandbox.stages.conftest import ROOT, tagged

BLUEPRINT = str(ROOT / "blueprints" / "sandbox-2p2d.yaml")


@pytest.mark.usefixtures("prefect_harness")
def test_a_fleet_update_cut_off_after_its_switch_releases_the_first_fleet_on_the_next_run(sandbox_stack, aws_env,
                                                                                         tmp_path):
    from flows import pipeline
    from flows.launch import launch_flow
    from flows.redeploy import redeploy
    from flows.reserve import reserve_flow
    from flows.teardown import teardown_flow
    from tasks.fleet import holder

    sandbox_stack.require("kube")
    first = reserve_flow(BLUEPRINT, "old")
    launch_flow(BLUEPRINT, "old")
    second = reserve_flow(BLUEPRINT, "old-f1")  # the second fleet's reservation, billing since before the switch
    # What a worker killed right after the switch leaves: the handover recorded as switched.
    run = pipeline.start(BLUEPRINT, "old", hold=False)
    pipeline.done(run, Handover("old-f1", "green", "blue", "switched"))
    try:
        result = redeploy(BLUEPRINT, "old", strategy="recreate")
        left = tagged(aws_env, "sandbox-2p2d")
        assert result["strategy"] == "fleet" and "cut off after its switch" in result["strategy_reason"]
        assert result["fleet_run_id"] == "old-f1" and result["previous_fleet_run_id"] == "old"
        # Only the second fleet's reservation (and its placement group) bills; the first is gone.
        assert left["reservations"] == [second.reservation_id] and "instances" not in left
        assert first.reservation_id not in left["reservations"]
        ledger = LedgerStore().load("sandbox-2p2d", "old")
        assert ledger.handover().phase == "released" and not ledger.live()
        assert result["extra_fleet_hours"] > 0 and result["extra_usd"] > 0  # both reservations billed a while
        assert holder(BLUEPRINT, "old") == "old-f1"  # later updates of run old go to old-f1
        assert holder(BLUEPRINT, "old-f1") == "old-f1"
    finally:
        teardown_flow(BLUEPRINT, None)
    assert tagged(aws_env, "sandbox-2p2d") == {}
