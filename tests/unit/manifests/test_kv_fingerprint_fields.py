"""The KV fingerprint's fields as a rolling update's refusal names them: what each reads when a
setting is left alone, set by flag or by environment, and a role that only one side has."""

from __future__ import annotations

from tasks.planning.kv_fingerprint import differences, fingerprint
from tests.unit.manifests.helpers import REFERENCE, combo, engine_container, render, variant


def _with_extra(*args: str) -> dict[str, dict[str, str]]:
    return fingerprint(render(variant(engine={"extra_args": list(args)})))


def test_settings_left_alone_read_default_and_off():
    for role in ("prefill", "decode"):
        fields = fingerprint(render(REFERENCE))[role]
        assert (fields["attention_backend"], fields["speculative"]) == ("default", "off")


def test_the_reference_fingerprint_reads_what_its_engines_are_told():
    decode = fingerprint(render(REFERENCE))["decode"]
    assert {k: decode[k] for k in ("engine", "engine_version", "connector", "transport_env", "block_size",
                                   "kv_cache_dtype", "dtype", "model", "model_revision")} == {
        "engine": "vllm", "engine_version": REFERENCE.engine.version, "connector": "mooncake",
        "transport_env": "FI_PROVIDER=efa", "block_size": "64", "kv_cache_dtype": "fp8_e4m3",
        "dtype": "bfloat16", "model": "/models/zai-org/GLM-5.1-FP8", "model_revision": "main"}
    assert decode["engine_image"] == REFERENCE.engine.image


def test_an_attention_backend_flag_counts_with_its_value_or_as_set():
    assert _with_extra("--attention-backend", "FLASHINFER")["decode"]["attention_backend"] == \
        "--attention-backend=FLASHINFER"
    assert _with_extra("--decode-attention-backend")["decode"]["attention_backend"] == \
        "--decode-attention-backend=true"
    both = _with_extra("--prefill-attention-backend", "fa3", "--attention-backend", "triton")["prefill"]
    assert both["attention_backend"] == "--attention-backend=triton,--prefill-attention-backend=fa3"


def test_an_attention_backend_chosen_by_environment_counts():
    objects = render(REFERENCE)
    engine_container(objects, "decode").setdefault("env", []).append(
        {"name": "VLLM_ATTENTION_BACKEND", "value": "FLASHINFER"})
    fields = fingerprint(objects)["decode"]
    assert fields["attention_backend"] == "VLLM_ATTENTION_BACKEND=FLASHINFER"
    assert "decode attention_backend: default -> VLLM_ATTENTION_BACKEND=FLASHINFER" in differences(
        fingerprint(render(REFERENCE)), fingerprint(objects))


def test_speculative_decoding_flags_count_in_name_order_with_their_values():
    fields = _with_extra("--speculative-model", "draft", "--speculative-disable", "--enforce-eager")["decode"]
    assert fields["speculative"] == "--speculative-disable=true,--speculative-model=draft"


def test_the_vllm_connectors_role_setting_is_not_part_of_the_fingerprint():
    for engine_connector in (("vllm", "nixl"), ("vllm", "mooncake")):
        fp = fingerprint(render(combo(*engine_connector)))
        assert "kv_role" not in fp["prefill"]["connector_config"]
        assert fp["prefill"]["connector_config"] == fp["decode"]["connector_config"]


def test_a_role_only_the_candidate_has_or_only_the_live_stack_has_is_named():
    live = {"decode": {"block_size": "64"}, "prefill": {"block_size": "64"}}
    assert differences(live, {"decode": {"block_size": "64"}}) == ["prefill: missing from the candidate"]
    assert differences({"decode": {"block_size": "64"}}, live) == ["prefill: only in the candidate"]


def test_differences_are_listed_role_by_role_in_name_order_with_both_values():
    live = {"prefill": {"pp": "2", "dtype": "bf16"}, "decode": {"pp": "1", "dtype": "bf16"}}
    candidate = {"prefill": {"pp": "4", "dtype": "bf16"}, "decode": {"pp": "1", "dtype": "fp16"}}
    assert differences(live, candidate) == ["decode dtype: bf16 -> fp16", "prefill pp: 2 -> 4"]


def test_a_field_the_live_stack_did_not_record_reads_as_empty():
    assert differences({"decode": {}}, {"decode": {"speculative": "off"}}) == ["decode speculative:  -> off"]
    assert differences({"decode": {"speculative": "off"}}, {"decode": {"speculative": "off"}}) == []


# --- more boundaries ---------------------------------------------------------------------------

from tests.unit.manifests.helpers import edit_script  # noqa: E402

VLLM_CONFIG = ('{"kv_connector":"MooncakeConnector","kv_role":"kv_consumer","kv_load_failure_policy":"fail",'
               '"kv_connector_extra_config":{"mooncake_protocol":"efa"}}')


def test_the_same_connector_settings_written_in_another_order_are_the_same_fingerprint():
    objects = render(REFERENCE)
    reordered = ('{"kv_connector_extra_config":{"mooncake_protocol":"efa"},"kv_load_failure_policy":"fail",'
                 '"kv_role":"kv_consumer","kv_connector":"MooncakeConnector"}')
    edit_script(engine_container(objects, "decode"), VLLM_CONFIG, reordered)
    assert differences(fingerprint(render(REFERENCE)), fingerprint(objects)) == []


def test_the_same_sglang_disaggregation_flags_in_another_order_are_the_same_fingerprint():
    bp = combo("sglang", "mooncake")
    objects = render(bp)
    container = engine_container(objects, "decode")
    edit_script(container, "--disaggregation-prefill-pp 2 \\", "--disaggregation-transfer-backend mooncake \\")
    edit_script(container, "--disaggregation-mode decode --disaggregation-transfer-backend mooncake",
                "--disaggregation-mode decode --disaggregation-prefill-pp 2")
    assert differences(fingerprint(render(bp)), fingerprint(objects)) == []


def test_a_speculative_flag_with_several_values_keeps_them_apart():
    assert _with_extra("--speculative-model", "a", "b")["decode"]["speculative"] == "--speculative-model=a b"


def test_every_transport_variable_set_is_listed_and_none_reads_none():
    assert fingerprint(render(combo("sglang", "mooncake")))["decode"]["transport_env"] == \
        "FI_PROVIDER=efa,MOONCAKE_PROTOCOL=efa"
    objects = render(REFERENCE)
    container = engine_container(objects, "decode")
    container["env"] = [e for e in container.get("env", []) if e["name"] != "FI_PROVIDER"]
    assert fingerprint(objects)["decode"]["transport_env"] == "none"


def test_a_stack_rendered_without_version_label_revision_or_image_reads_them_as_empty():
    objects = render(REFERENCE)
    for o in objects:
        if o["kind"] == "LeaderWorkerSet" and o["metadata"]["name"] == "decode":
            o["metadata"].get("labels", {}).pop("app.kubernetes.io/version", None)
            o["metadata"].pop("annotations", None)
    engine_container(objects, "decode").pop("image")
    decode = fingerprint(objects)["decode"]
    assert (decode["engine_version"], decode["model_revision"], decode["engine_image"]) == ("", "", "")


def test_a_role_missing_from_the_candidate_does_not_hide_the_next_roles_differences():
    live = {"decode": {"pp": "1"}, "prefill": {"pp": "2"}}
    assert differences(live, {"prefill": {"pp": "4"}}) == ["decode: missing from the candidate", "prefill pp: 2 -> 4"]


def test_an_empty_setting_the_live_stack_did_not_record_is_no_difference():
    assert differences({"decode": {}}, {"decode": {"model_revision": ""}}) == []
