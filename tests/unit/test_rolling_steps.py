"""The order of a rolling update's steps, and what each applies (``tasks.planning.rolling``)."""

from __future__ import annotations

import pytest

from blueprints.loader import load_blueprint
from tasks.errors import ConfigError
from tasks.planning import rolling
from tasks.planning.manifests import render_checked

SANDBOX = "blueprints/sandbox-2p2d.yaml"


def _bp(engine: str = "vllm", connector: str = "nixl"):
    bp = load_blueprint(SANDBOX)
    return bp.model_copy(update={"engine": bp.engine.model_copy(update={"name": engine}),
                                 "kv_transfer": bp.kv_transfer.model_copy(update={"connector": connector})})


def test_decode_rolls_first_and_restarts_after_prefill_only_for_vllm_with_nixl():
    assert [(s.action, s.role) for s in rolling.steps(_bp("vllm", "nixl"))] == [
        ("roll", "decode"), ("roll", "prefill"), ("restart", "decode")]
    assert "NIXL agent" in rolling.decode_restart_reason(_bp("vllm", "nixl"))
    for engine, connector in (("vllm", "mooncake"), ("sglang", "nixl"), ("sglang", "mooncake")):
        assert [(s.action, s.role) for s in rolling.steps(_bp(engine, connector))] == [
            ("roll", "decode"), ("roll", "prefill")], (engine, connector)
        assert rolling.decode_restart_reason(_bp(engine, connector)) == ""


def test_each_role_applies_its_own_leaderworkerset_carrying_the_stack_revision():
    objects = render_checked(load_blueprint(SANDBOX), "blue", "/mnt/weights")
    revisions = {rolling.revision_of(rolling.role_object(objects, role)) for role in rolling.ROLES}
    assert len(revisions) == 1 and revisions != {""}
    assert rolling.role_object(objects, "decode")["metadata"]["name"] == "decode"
    with pytest.raises(ConfigError, match="expected one router LeaderWorkerSet"):
        rolling.role_object(objects, "router")


def test_a_revert_rolls_the_roles_back_in_order_and_restarts_decode_after_prefill_only_where_needed():
    nixl, mooncake = _bp("vllm", "nixl"), _bp("vllm", "mooncake")
    steps = lambda bp, roles: [(s.action, s.role) for s in rolling.revert_steps(bp, roles)]  # noqa: E731
    assert steps(nixl, ["decode"]) == [("roll", "decode")]
    assert steps(nixl, ["prefill"]) == [("roll", "prefill"), ("restart", "decode")]
    assert steps(nixl, ["prefill", "decode"]) == [("roll", "prefill"), ("roll", "decode")]  # decode comes after
    assert steps(nixl, ["decode", "prefill"]) == [("roll", "decode"), ("roll", "prefill"), ("restart", "decode")]
    assert steps(mooncake, ["prefill"]) == [("roll", "prefill")]


def test_a_replayed_roll_keeps_its_generation_and_anything_else_gets_a_new_one():
    from tasks.planning.records import Deployed, RoleRolled

    bp = _bp()
    rolled = [RoleRolled("decode", "a", "b", 2.0, {}), RoleRolled("prefill", "a", "b", 3.0, {}),
              RoleRolled("decode", "b", "b", 1.0, {})]

    def before(colour, generation):
        return Deployed(bp.name, colour, colour, "ns", "st", "router", {}, 1.0, "", generation)

    first = rolling.deployed_after_roll(bp, "blue", "b", rolled, {"ready": 1.0}, "ok", before("blue", "a-1"), "x1")
    assert first.generation == "b-x1" and first.bring_up_s == 6.0
    assert first.phases_s == {"ready": 1.0, "roll_decode": 2.0, "roll_prefill": 3.0, "restart_decode": 1.0}
    assert rolling.deployed_after_roll(bp, "blue", "b", rolled, {}, "", first, "x2").generation == "b-x1"  # replay
    assert rolling.deployed_after_roll(bp, "blue", "b", rolled, {}, "", before("green", "b-x1"), "x3").generation \
        == "b-x3"  # the other colour's record is no replay
    assert rolling.deployed_after_revert(bp, "blue", "a", rolled, "", "x4").generation == "a-x4"
