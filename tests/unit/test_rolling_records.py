"""What a rolling update records and looks up (``tasks.planning.rolling``): the deploy record of a
rolled or reverted colour, which LeaderWorkerSet is a role's, and a stack's revision label."""

from __future__ import annotations

import pytest

from blueprints.loader import load_blueprint
from tasks.errors import ConfigError
from tasks.planning import rolling
from tasks.planning.manifests.common import REVISION_LABEL
from tasks.planning.records import Deployed, RoleRolled

BP = load_blueprint("blueprints/sandbox-2p2d.yaml")
ROLLED = [RoleRolled("decode", "a", "b", 2.0004, {}), RoleRolled("prefill", "a", "b", 3.0, {})]


def _before(colour: str, generation: str) -> Deployed:
    return Deployed(BP.name, colour, colour, "ns", "st", "router", {}, 1.0, "", generation)


def test_a_rolled_colour_is_recorded_live_in_its_own_namespaces_behind_its_router():
    rec = rolling.deployed_after_roll(BP, "green", "b", ROLLED, {"ready": 1.5}, "canary ok", None, "x1")
    assert rec == Deployed(BP.name, "green", "green", f"{BP.name}-green", BP.name, "router-green",
                           {"ready": 1.5, "roll_decode": 2.0004, "roll_prefill": 3.0}, 5.0, "canary ok", "b-x1")


def test_the_bring_up_time_of_a_roll_is_the_sum_of_its_steps_to_the_millisecond():
    steps = [RoleRolled("decode", "a", "b", 1.00049, {}), RoleRolled("prefill", "a", "b", 1.0, {})]
    assert rolling.deployed_after_roll(BP, "blue", "b", steps, {}, "", None, "x").bring_up_s == 2.0


def test_a_roll_whose_earlier_record_is_another_revision_gets_a_new_generation():
    # "bx-1" starts with "b" but is revision "bx"'s: no replay of revision b's update
    rec = rolling.deployed_after_roll(BP, "blue", "b", ROLLED, {}, "", _before("blue", "bx-1"), "x2")
    assert rec.generation == "b-x2"


def test_a_replayed_roll_keeps_the_generation_the_gate_measured():
    rec = rolling.deployed_after_roll(BP, "blue", "b", ROLLED, {}, "", _before("blue", "b-x1"), "x2")
    assert rec.generation == "b-x1"


def test_a_full_revert_is_recorded_per_role_with_a_generation_of_its_own():
    rec = rolling.deployed_after_revert(BP, "blue", "a", ROLLED, "reverted, canary ok", "x9")
    assert rec == Deployed(BP.name, "blue", "blue", f"{BP.name}-blue", BP.name, "router-blue",
                           {"revert_decode": 2.0004, "revert_prefill": 3.0}, 5.0, "reverted, canary ok", "a-x9")


def _lws(name: str, labels: dict | None = None, kind: str = "LeaderWorkerSet") -> dict:
    return {"kind": kind, "metadata": {"name": name, **({"labels": labels} if labels is not None else {})}}


def test_a_role_is_found_among_objects_of_other_kinds_with_the_same_name():
    decode = _lws("decode", {REVISION_LABEL: "r1"})
    assert rolling.role_object([_lws("decode", kind="Service"), decode], "decode") is decode


def test_a_role_missing_or_twice_among_the_manifests_is_refused_with_the_count():
    with pytest.raises(ConfigError, match="expected one decode LeaderWorkerSet among the manifests, found 0"):
        rolling.role_object([_lws("prefill")], "decode")
    with pytest.raises(ConfigError, match="found 2"):
        rolling.role_object([_lws("decode"), _lws("decode")], "decode")


def test_a_leaderworkerset_without_a_revision_label_has_no_revision():
    assert rolling.revision_of(_lws("decode", {REVISION_LABEL: "r7"})) == "r7"
    assert rolling.revision_of(_lws("decode", {"app": "x"})) == ""
    assert rolling.revision_of(_lws("decode")) == ""
    assert rolling.revision_of({"metadata": {"labels": None}}) == ""
    assert rolling.revision_of({"metadata": None}) == ""
    assert rolling.revision_of({}) == ""


def test_decode_restarts_after_a_reverted_prefill_only_when_prefill_came_after_it():
    nixl = BP.model_copy(update={"engine": BP.engine.model_copy(update={"name": "vllm"}),
                                 "kv_transfer": BP.kv_transfer.model_copy(update={"connector": "nixl"})})
    steps = lambda roles: [(s.action, s.role) for s in rolling.revert_steps(nixl, roles)]  # noqa: E731
    assert steps([]) == []
    assert steps(["decode", "prefill"]) == [("roll", "decode"), ("roll", "prefill"), ("restart", "decode")]
    assert steps(["decode", "prefill", "decode"]) == [("roll", "decode"), ("roll", "prefill"), ("roll", "decode")]
    assert steps(["decode"]) == [("roll", "decode")]


def test_the_reason_decode_restarts_after_prefill_is_given_in_full():
    nixl = BP.model_copy(update={"engine": BP.engine.model_copy(update={"name": "vllm"}),
                                 "kv_transfer": BP.kv_transfer.model_copy(update={"connector": "nixl"})})
    assert rolling.decode_restart_reason(nixl) == (
        "vLLM's NixlConnector keeps the prefill's NIXL agent metadata from its handshake; a restarted prefill has a "
        "new agent, so decode restarts too (llm-d: restart any decode replica connected to a restarted prefill pod)")


def test_bring_up_and_revert_times_keep_their_milliseconds():
    steps = [RoleRolled("decode", "a", "b", 2.25, {}), RoleRolled("prefill", "a", "b", 1.5, {})]
    assert rolling.deployed_after_roll(BP, "blue", "b", steps, {}, "", None, "x").bring_up_s == 3.75
    assert rolling.deployed_after_revert(BP, "blue", "a", steps, "", "x").bring_up_s == 3.75
