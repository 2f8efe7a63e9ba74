"""The KV fingerprint read back from rendered manifests, and the one revision label of a stack."""

from __future__ import annotations

import pytest

from tasks.planning.kv_fingerprint import differences, fingerprint
from tasks.planning.manifests.common import REVISION_LABEL
from tests.unit.manifests.helpers import COMBOS, REFERENCE, combo, render, variant


def _diff(candidate, live=REFERENCE) -> list[str]:
    return differences(fingerprint(render(live)), fingerprint(render(candidate)))


@pytest.mark.parametrize("engine, connector", COMBOS)
def test_the_same_blueprint_in_the_other_colour_has_the_same_fingerprint(engine, connector):
    bp = combo(engine, connector)
    assert differences(fingerprint(render(bp, "blue")), fingerprint(render(bp, "green"))) == []


@pytest.mark.parametrize("change, field", [
    ({"engine": {"block_size": 128}}, "block_size"),
    ({"engine": {"kv_cache_dtype": "bf16"}}, "kv_cache_dtype"),
    ({"engine": {"version": "0.23.0"}}, "engine_version"),
    ({"kv": {"protocol": "tcp"}}, "connector_config"),
    ({"model": {"revision": "0123abcd"}}, "model_revision"),
    ({"engine": {"image": REFERENCE.engine.image[:-8] + "0" * 8}}, "engine_image"),
    ({"engine": {"extra_args": ["--attention-backend", "FLASHINFER"]}}, "attention_backend"),
    ({"engine": {"extra_args": ["--speculative-config", '{"method":"mtp","num_speculative_tokens":1}']}},
     "speculative"),
])
def test_each_kv_relevant_change_is_named_per_role(change, field):
    lines = _diff(variant(**change))
    assert {line.split(":")[0] for line in lines} == {f"prefill {field}", f"decode {field}"}, lines


def test_a_block_size_change_names_both_values():
    assert "decode block_size: 64 -> 128" in _diff(variant(engine={"block_size": 128}))


@pytest.mark.parametrize("change", [
    {"engine": {"gpu_memory_utilization": 0.85}},
    {"engine": {"extra_args": ["--max-num-seqs", "128"]}},
])
def test_changes_that_leave_the_kv_alone_keep_the_fingerprint(change):
    assert _diff(variant(**change)) == []


def test_sglang_connector_settings_count_but_its_role_flag_does_not():
    mooncake = fingerprint(render(combo("sglang", "mooncake")))
    for role in ("prefill", "decode"):
        assert "--disaggregation-transfer-backend" in mooncake[role]["connector_config"]
        assert "--disaggregation-mode" not in mooncake[role]["connector_config"]
    assert "decode connector: mooncake -> nixl" in differences(mooncake, fingerprint(render(combo("sglang", "nixl"))))


def _revisions(objects) -> set[str]:
    out = set()
    for lws in (o for o in objects if o["kind"] == "LeaderWorkerSet"):
        out.add(lws["metadata"]["labels"][REVISION_LABEL])
        lwt = lws["spec"]["leaderWorkerTemplate"]
        out |= {lwt[k]["metadata"]["labels"][REVISION_LABEL] for k in ("leaderTemplate", "workerTemplate")}
    return out


def test_prefill_and_decode_pods_share_one_revision_in_either_colour():
    assert len(_revisions(render(REFERENCE, "blue"))) == 1
    assert _revisions(render(REFERENCE, "blue")) == _revisions(render(REFERENCE, "green"))


@pytest.mark.parametrize("change", [{"engine": {"image": REFERENCE.engine.image[:-8] + "0" * 8}},
                                    {"engine": {"extra_args": ["--max-num-seqs", "128"]}},
                                    {"model": {"revision": "0123abcd"}}])
def test_any_change_to_what_the_engines_get_is_a_new_revision(change):
    assert _revisions(render(variant(**change))) != _revisions(render(REFERENCE))


def test_sglangs_transport_chosen_by_environment_counts():
    efa, tcp = combo("sglang", "mooncake"), combo("sglang", "mooncake", protocol="tcp")
    lines = differences(fingerprint(render(efa)), fingerprint(render(tcp)))
    assert any(line.startswith("decode transport_env:") for line in lines), lines


def test_a_change_of_the_kv_sharding_counts():
    bp = variant(topology={"prefill": REFERENCE.topology.prefill.model_copy(update={"tp": 4, "pp": 4})})
    lines = _diff(bp)
    assert "prefill attention_tp: 8 -> 4" in lines and "prefill pp: 2 -> 4" in lines, lines
