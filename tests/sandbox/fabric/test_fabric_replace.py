"""Stage 3 end to end through its Prefect flow on a launched sandbox fleet: a node with a slow
link is pinned by the pairwise layer, terminated, replaced through EC2 and EKS in the same
role, validated again, and the run's ledger, fleet, persisted results and progress artifacts
say so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flows.fabric import fabric_flow
from tasks.adapters.ledger_store import LedgerStore
from tasks.planning.identity import TAG_RUN
from tests.fixtures.artifacts import progress_artifacts
from tests.sandbox.fabric.conftest import launch_fleet

pytestmark = [pytest.mark.sandbox, pytest.mark.usefixtures("prefect_harness")]


@pytest.fixture(scope="module")
def launched(sandbox_stack, aws_sandbox, sandbox_state_dir, tmp_path_factory):
    yield from launch_fleet(sandbox_stack, aws_sandbox, sandbox_state_dir, tmp_path_factory.mktemp("replace"), "f0002")


def test_a_node_with_a_slow_link_is_isolated_by_the_pairwise_layer_replaced_and_the_stage_passes(launched):
    nodes = launched.nodes()
    slow = nodes[1]
    launched.fault(slow.name, slow_link=2)
    run_id = launched.run.identity.run_id
    launched.admin.clear_requests()
    # The terminated node's reservation slot is not free at the first try (as on EC2 for minutes).
    launched.admin.inject(action="RunInstances", code="ReservationCapacityExceeded", times=1)

    state = fabric_flow(str(launched.blueprint_path), run_id, return_state=True)
    summary = state.result()

    assert summary.passed and summary.passes == 2
    ((old, new),) = [(r.old, r.new) for r in summary.replaced]
    assert old == slow.name and new not in {n.name for n in nodes}
    saved = json.loads((Path(summary.results) / "results.json").read_text())
    first, second = saved["passes"]
    assert first["layers"][-1]["name"] == "pairwise" and list(first["layers"][-1]["isolate"]) == [slow.name]
    evidence = first["layers"][-1]["isolate"][slow.name]
    assert "failed with every partner" in evidence and "below the 300 GB/s floor" in evidence
    assert [layer["name"] for layer in second["layers"]] == ["inventory", "loopback", "single-node", "pairwise",
                                                            "full-set"]
    assert {v["verdict"] for v in second["node_verdicts"]} <= {"PASS", "MONITOR"}

    launches = launched.admin.requests(action="RunInstances")
    assert len(launches) == 2 and launches[0]["params"]["ClientToken"] == launches[1]["params"]["ClientToken"]
    assert launches[1]["params"]["MinCount"] == launches[1]["params"]["MaxCount"] == 1
    (gone,) = launched.adapters.instances.describe(ids=[old])
    (fresh,) = launched.adapters.instances.describe(ids=[new])
    assert gone.state == "terminated"
    assert fresh.state == "running" and fresh.tags[TAG_RUN] == run_id
    labels = {n.instance_id: n.labels for n in launched.kube.nodes()}
    assert labels[new]["pdlift.io/role"] == slow.role

    ledger = LedgerStore().load(launched.bp.name, run_id)
    fleet = ledger.fleet()
    assert {n.instance_id for n in fleet.nodes} == {n.name for n in nodes} - {old} | {new}
    assert next(n for n in fleet.nodes if n.instance_id == new).role == slow.role
    assert ledger.records["fabric"].passed is True
    assert any(e.resource_id == new and e.stage == "fabric" for e in ledger.entries)
    assert any(e.resource_id == old and e.ended_at for e in ledger.entries)

    report = (Path(summary.results) / "report.md").read_text()
    assert f"replaced {old} with {new}" in report and report.splitlines()[0].endswith(": PASS")

    # Progress: pass 1 ran 4 nodes x 3 layers and the 3 tournament rounds, then stopped; pass 2 ran
    # what the new node needed (a node per layer, its 3 pairs in 3 rounds) and the 2 whole-set tests.
    progress = progress_artifacts(flow_run_id=state.state_details.flow_run_id)
    layers = ("inventory", "loopback", "single-node", "pairwise", "full-set", "total")
    assert {k: pct for k, (pct, _) in progress.items()} == {f"sandbox-2p2d-fabric-{n}": 100.0 for n in layers}
    assert progress["sandbox-2p2d-fabric-pairwise"][1] == "fabric pairwise: 6 of 6 pair rounds run"
    assert progress["sandbox-2p2d-fabric-total"][1].startswith("fabric total: 23 of 23 units done")
