"""A fleet update cut off after its switch, with production pointing at neither of its colours
(say someone deleted the production Service meanwhile): the next run releases neither fleet and
says so; a teardown of the first run releases the fleet that replaced it too."""

from pathlib import Path

import pytest

from tasks.adapters.ledger_store import LedgerStore
from tasks.errors import StageFailed
from tasks.planning.records import Handover
from tests.sandbox.stages.conftest import ROOT, tagged

BLUEPRINT = str(ROOT / "blueprints" / "sandbox-2p2d.yaml")


@pytest.mark.usefixtures("prefect_harness")
def test_a_cut_off_fleet_update_with_production_on_neither_colour_keeps_both_fleets_until_a_person_decides(
        sandbox_stack, aws_env):
    from flows import pipeline
    from flows.launch import launch_flow
    from flows.redeploy import redeploy
    from flows.reserve import reserve_flow
    from flows.teardown import teardown_flow

    sandbox_stack.require("kube")
    # the premise; an earlier test of this session may have promoted one
    _delete_the_production_service(Path(sandbox_stack.sandbox.env({"kube"})["KUBECONFIG"]))
    first = reserve_flow(BLUEPRINT, "old")
    launch_flow(BLUEPRINT, "old")
    second = reserve_flow(BLUEPRINT, "old-f1")  # the second fleet's reservation
    # What a worker killed right after the switch leaves: the handover recorded as switched.
    run = pipeline.start(BLUEPRINT, "old", hold=False)
    pipeline.done(run, Handover("old-f1", "green", "blue", "switched"))
    before = tagged(aws_env, "sandbox-2p2d")
    try:
        with pytest.raises(StageFailed, match="routes to neither colour of the fleet update that answers; both fleets are kept"):
            redeploy(BLUEPRINT, "old", strategy="recreate")  # whatever is asked, the cut-off swap comes first
        assert tagged(aws_env, "sandbox-2p2d") == before  # nothing released
        assert sorted(before["reservations"]) == sorted([first.reservation_id, second.reservation_id])
        assert len(before["instances"]) == 4
        assert LedgerStore().load("sandbox-2p2d", "old").handover().phase == "switched"
        # A teardown of the first run releases the fleet that replaced it as well.
        released = teardown_flow(BLUEPRINT, "old")
        assert any(second.reservation_id in line and "(run old-f1)" in line for line in released), released
        assert tagged(aws_env, "sandbox-2p2d") == {}
    finally:
        teardown_flow(BLUEPRINT, None)


def _delete_the_production_service(kubeconfig: Path) -> None:
    """Through the stand-in's kubeconfig, which a launch writes: none yet, nothing was promoted."""
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    if not kubeconfig.exists():
        return
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
    try:
        core.delete_namespaced_service("sandbox-2p2d", "sandbox-2p2d")
    except ApiException as e:
        if e.status != 404:
            raise
