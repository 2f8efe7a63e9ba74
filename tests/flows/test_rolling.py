"""The rolling strategy on a fleet with no room for a second colour (four nodes, every engine pod
taking all 8 GPUs of its node): the live colour's roles replaced in place, decode first.

A change that moves the KV layout is refused before anything is touched; an unrelated flag rolls
both roles and the gate records the new baseline; a decode that cannot start is reverted alone,
prefill never restarted. Production is probed from outside the product throughout.
"""

from __future__ import annotations

import json

import pytest
import yaml

from tasks.errors import StackFailure
from tasks.planning.manifests.common import LWS_NAME_LABEL, REVISION_LABEL, colour_namespace
from tasks.planning.manifests.pods import LWS_API
from tasks.planning.strategy import StrategyRefused
from tests.flows.test_recreate import _probe, _write_blueprint, fleet, production_answering  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_harness")]
ROLES = ("prefill", "decode")


def _revisions(fleet) -> dict[str, str]:
    ns = colour_namespace(fleet.blueprint, fleet.production_colour())
    return {role: fleet.kube.get(LWS_API, "LeaderWorkerSet", role, ns)["metadata"]["labels"][REVISION_LABEL]
            for role in ROLES}


def _pods(fleet) -> dict[str, dict[str, str]]:
    """Role -> pod name -> (uid, revision label) of the live colour's engine pods."""
    ns = colour_namespace(fleet.blueprint, fleet.production_colour())
    return {role: {p.name: (p.uid, p.labels.get(REVISION_LABEL)) for p in fleet.kube.pods(ns, {LWS_NAME_LABEL: role})
                   if not p.deleting} for role in ROLES}


def _with_engine(fleet, **engine) -> None:
    doc = yaml.safe_load(fleet.path.read_text())
    doc["engine"].update(engine)
    fleet.path.write_text(yaml.safe_dump(doc, sort_keys=False))


def _baseline(fleet) -> dict:
    from tasks.stages.benchmark import baseline_path
    return json.loads(baseline_path(fleet.directory / "state", fleet.name).read_text())


@pytest.fixture(scope="module")
def fleet_connector() -> str:
    """NIXL: vLLM's NixlConnector needs decode restarted after prefill, so every step runs."""
    return "nixl"


@pytest.fixture(autouse=True)
def blueprint_restored(fleet):
    """Each test changes the blueprint; the next starts from the fixture's."""
    yield
    _write_blueprint(fleet)


def test_a_block_size_change_is_refused_by_rolling_naming_the_field_and_nothing_is_touched(fleet):
    from flows.redeploy import redeploy

    before = _pods(fleet)
    _with_engine(fleet, block_size=128)
    with pytest.raises(StrategyRefused, match=r"decode block_size: 64 -> 128.*prefill block_size: 64 -> 128"):
        redeploy(str(fleet.path), fleet.run_id, strategy="rolling")
    assert _pods(fleet) == before  # refused before the weights stage and before any apply


def test_an_unrelated_flag_rolls_decode_then_prefill_in_place_and_the_gate_records_the_new_baseline(fleet):
    from flows.update import rolling_flow

    live, revisions_before, pods_before = fleet.production_colour(), _revisions(fleet), _pods(fleet)
    baseline_before = _baseline(fleet)
    _with_engine(fleet, extra_args=["--seed", "7"])  # no KV-relevant setting moves
    with _probe(fleet) as probe:
        result = rolling_flow(str(fleet.path), fleet.run_id)
    assert result["outcome"] == "promoted" and result["colour"] == live == fleet.production_colour()
    revisions = _revisions(fleet)
    assert revisions["prefill"] == revisions["decode"] == result["revision"] != revisions_before["decode"]
    assert result["previous_revision"] == revisions_before["decode"]
    # Every engine pod was replaced by one on the new revision, on the fleet it had (no second colour).
    pods = _pods(fleet)
    for role in ROLES:
        assert {rev for _, rev in pods[role].values()} == {result["revision"]}
        assert not {uid for uid, _ in pods[role].values()} & {uid for uid, _ in pods_before[role].values()}
    other = "green" if live == "blue" else "blue"
    assert fleet.kube.get("v1", "Namespace", colour_namespace(fleet.blueprint, other)) is None
    # Decode first, then prefill, then decode again (vLLM + NIXL: a restarted prefill's new agent).
    assert list(result["phases_s"]) == ["decode_roll", "prefill_roll", "decode_restart"], result["phases_s"]
    # The gate measured the updated colour and its measurement is the baseline now.
    assert _baseline(fleet)["created_at"] != baseline_before["created_at"]
    assert probe.rows and probe.rows[-1][1] == 200
    # The snapshot is the new revision's: the next update (and its revert) starts from it.
    from flows import pipeline
    from tasks import update as steps
    assert steps.snapshot(pipeline.start(str(fleet.path), fleet.run_id), live).revision == result["revision"]


def test_a_decode_that_cannot_start_is_reverted_alone_and_prefill_is_never_restarted(fleet):
    from flows.update import rolling_flow

    revisions_before, pods_before = _revisions(fleet), _pods(fleet)
    # A flag this vLLM does not know: argparse exits 2, as it would on EKS.
    _with_engine(fleet, extra_args=["--not-a-vllm-flag"])
    with _probe(fleet) as probe, pytest.raises(StackFailure, match="decode") as failed:
        rolling_flow(str(fleet.path), fleet.run_id)
    assert "prefill" not in str(failed.value).split(":")[0]
    assert _revisions(fleet) == revisions_before
    pods = _pods(fleet)
    assert pods["prefill"] == pods_before["prefill"]  # the same pods: prefill was never touched
    assert {rev for _, rev in pods["decode"].values()} == {revisions_before["decode"]}
    assert not {uid for uid, _ in pods["decode"].values()} & {uid for uid, _ in pods_before["decode"].values()}
    assert fleet.production_colour() is not None
    assert probe.rows and probe.rows[-1][1] == 200


def test_a_slower_update_fails_the_gate_and_both_roles_are_reverted_to_the_snapshot(fleet):
    from flows.update import rolling_flow
    from tasks.errors import BenchmarkBelowGate

    live, revisions_before, baseline_before = fleet.production_colour(), _revisions(fleet), _baseline(fleet)
    _with_engine(fleet, extra_args=["--seed", "9"])
    # Only the engines started with the new flag are slower (the same pods, the same namespace).
    fleet.engine_rules(live, latency={"tpot_scale": 1.4}, args_contain="--seed 9")
    try:
        with _probe(fleet) as probe, pytest.raises(BenchmarkBelowGate, match="tpot_mean") as failed:
            rolling_flow(str(fleet.path), fleet.run_id)
    finally:
        fleet.engine_rules()
    assert "reverted to its snapshot" in str(failed.value)
    assert fleet.production_colour() == live and _revisions(fleet) == revisions_before
    for role, pods in _pods(fleet).items():
        assert {rev for _, rev in pods.values()} == {revisions_before[role]}, role
    assert _baseline(fleet) == baseline_before  # a FAIL records nothing
    assert probe.rows and probe.rows[-1][1] == 200


def test_a_rolling_update_cut_off_after_decode_goes_on_at_prefill(fleet):
    """What a worker killed right after decode rolled leaves: decode on the candidate's revision,
    prefill on the snapshot's. The next run accepts that mix (it is this same change) and
    finishes; any other mix is refused."""
    from flows import pipeline
    from flows.update import rolling_flow
    from tasks import rolling as steps

    live, revisions_before = fleet.production_colour(), _revisions(fleet)
    _with_engine(fleet, extra_args=["--seed", "11"])
    run = pipeline.start(str(fleet.path), fleet.run_id)
    cut = steps.roll_role(run, live, "decode", poll_s=0.5)
    assert cut.to_revision != revisions_before["decode"] == _revisions(fleet)["prefill"]
    result = rolling_flow(str(fleet.path), fleet.run_id)
    assert result["outcome"] == "promoted" and result["revision"] == cut.to_revision
    assert set(_revisions(fleet).values()) == {cut.to_revision}
