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
