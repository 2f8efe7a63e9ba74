"""Each unsafe combination is rejected before anything is applied, with its reason."""

from __future__ import annotations

import pytest

from blueprints.schema import GqaAttention
from tasks.errors import ConfigError
from tasks.planning.manifests import check_invariants, render_checked, render_production_service
from tests.unit.manifests.helpers import (COMBOS, REFERENCE, WEIGHTS, combo, edit_script, engine_container, find,
                                          render, variant)


def _rules(objects, bp=REFERENCE) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for v in check_invariants(objects, bp):
        out.setdefault(v.rule, []).append(str(v))
    return out


@pytest.mark.parametrize("engine,connector", COMBOS)
def test_every_rendered_combination_satisfies_the_invariants(engine, connector):
    bp = combo(engine, connector)
    objects = render(bp) + [render_production_service(bp, "blue")]
    assert check_invariants(objects, bp) == []


def test_a_decode_with_another_kv_cache_dtype_is_rejected():
    objects = render()
    edit_script(engine_container(objects, "decode", "workerTemplate"), "--kv-cache-dtype fp8", "--kv-cache-dtype auto")
    found = _rules(objects)
    assert list(found) == ["same-kv-cache-dtype"]
    assert "decode (worker)" in found["same-kv-cache-dtype"][0] and "'auto'" in found["same-kv-cache-dtype"][0]


def test_a_different_model_block_size_or_dtype_on_one_side_is_rejected():
    objects = render(combo("sglang", "mooncake"))
    decode = engine_container(objects, "decode")
    edit_script(decode, "--page-size 64", "--page-size 32")
    edit_script(decode, "--dtype bfloat16", "--dtype float16")
    edit_script(decode, "--served-model-name zai-org/GLM-5.1-FP8", "--served-model-name zai-org/GLM-5.1")
    found = _rules(objects, combo("sglang", "mooncake"))
    assert {"same-block-size", "same-dtype", "same-model"} <= set(found)


def test_pull_nixl_with_pipeline_parallel_prefill_is_rejected():
    bp = combo("vllm", "nixl", nixl_mode="pull")
    found = _rules(render(bp), bp)
    assert list(found) == ["connector-pp"]
    assert "NixlConnector rejects pipeline parallel prefill (pp=2" in found["connector-pp"][0]
    with pytest.raises(ConfigError, match="connector-pp"):
        render_checked(bp, "blue", WEIGHTS)


def test_sglang_decode_must_be_told_the_prefill_pipeline_size():
    bp = combo("sglang", "mooncake")
    objects = render(bp)
    edit_script(engine_container(objects, "decode"), "--disaggregation-prefill-pp 2", "--disaggregation-prefill-pp 1")
    assert "connector-pp" in _rules(objects, bp)


def test_decode_tp_below_prefill_tp_is_rejected_for_a_gqa_model_but_not_for_mla():
    gqa = GqaAttention(kind="gqa", layers=61, kv_heads=8, head_dim=128)
    bp = variant(model={"attention": gqa})
    found = _rules(render(bp), bp)
    assert list(found) == ["decode-tp"]
    assert "decode attention TP 1 < prefill TP 8" in found["decode-tp"][0]
    assert _rules(render(variant(model={"attention": gqa}, engine={"name": "sglang"})),
                  variant(model={"attention": gqa}, engine={"name": "sglang"}))["decode-tp"]
    assert "decode-tp" not in _rules(render())


def test_a_router_pointing_at_the_wrong_engine_port_is_rejected():
    objects = render()
    router = find(objects, "Deployment", "router-blue")["spec"]["template"]["spec"]["containers"][0]
    router["args"] = [a.replace(".svc.cluster.local:8200", ".svc.cluster.local:8000") for a in router["args"]]
    found = _rules(objects)
    assert list(found) == ["ports"]
    assert "--decode uses port 8000" in found["ports"][0]


def test_a_router_with_the_wrong_bootstrap_port_is_rejected():
    objects = render(combo("sglang", "nixl"))
    router = find(objects, "Deployment", "router-blue")["spec"]["template"]["spec"]["containers"][0]
    router["args"][router["args"].index("8998")] = "8999"
    assert any("bootstrap port 8999 but the prefill serves 8998" in r for r in _rules(objects)["ports"])


def test_a_router_listening_elsewhere_than_its_service_targets_is_rejected():
    objects = render()
    router = find(objects, "Deployment", "router-blue")["spec"]["template"]["spec"]["containers"][0]
    router["args"][router["args"].index("--port") + 1] = "9090"
    assert any("the router listens on 9090" in r for r in _rules(objects)["ports"])


def test_an_image_without_a_digest_is_rejected():
    objects = render()
    engine_container(objects, "decode")["image"] = "vllm/vllm-openai:v0.22.0"
    found = _rules(objects)
    assert list(found) == ["image-digest"] and "vllm/vllm-openai:v0.22.0" in found["image-digest"][0]


@pytest.mark.parametrize("engine,connector,drop", [
    ("vllm", "mooncake", "FI_PROVIDER"), ("vllm", "nixl", "VLLM_NIXL_SIDE_CHANNEL_HOST"),
    ("sglang", "mooncake", "MOONCAKE_PROTOCOL"), ("sglang", "nixl", "SGLANG_DISAGGREGATION_NIXL_BACKEND"),
    ("vllm", "nixl", "NIXL_LOG_LEVEL"), ("sglang", "nixl", "NIXL_LOG_LEVEL")])
def test_protocol_efa_with_its_environment_missing_is_rejected(engine, connector, drop):
    bp = combo(engine, connector)
    objects = render(bp)
    container = engine_container(objects, "prefill", "workerTemplate")
    container["env"] = [e for e in container["env"] if e["name"] != drop]
    found = _rules(objects, bp)
    assert list(found) == ["efa"] and drop in found["efa"][0] and "prefill (worker)" in found["efa"][0]


def test_protocol_efa_with_tcp_in_the_kv_config_is_rejected():
    objects = render()
    edit_script(engine_container(objects, "decode"), '"mooncake_protocol":"efa"', '"mooncake_protocol":"tcp"')
    assert "mooncake_protocol" in _rules(objects)["efa"][0]


def test_leader_ready_startup_would_deadlock_a_multi_node_group():
    objects = render()
    find(objects, "LeaderWorkerSet", "prefill")["spec"]["startupPolicy"] = "LeaderReady"
    assert list(_rules(objects)) == ["group-startup"]


def test_a_group_size_that_differs_from_the_engine_node_count_is_rejected():
    objects = render()
    find(objects, "LeaderWorkerSet", "decode")["spec"]["leaderWorkerTemplate"]["size"] = 3
    assert "the engine expects 2 node(s), the group has 3" in _rules(objects)["group-size"][0]


def test_render_checked_returns_the_objects_when_everything_holds():
    assert [o["kind"] for o in render_checked(REFERENCE, "green", WEIGHTS)][-1] == "Deployment"
