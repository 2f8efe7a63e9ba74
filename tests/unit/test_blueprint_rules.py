"""Each cross-field rule rejects its combination with the reason, at the field concerned."""

from pathlib import Path

import pytest

from blueprints.loader import load_blueprint, parse_blueprint
from tasks.errors import BlueprintError

ROOT = Path(__file__).resolve().parents[2]
REFERENCE_TEXT = (ROOT / "blueprints" / "glm51-fp8-2p2d.yaml").read_text()


def _problems(text: str) -> dict[str, str]:
    with pytest.raises(BlueprintError) as info:
        parse_blueprint(text, "bp.yaml")
    return {p.field: f"{p.message} | {p.hint}" for p in info.value.problems}


def _edit(*pairs: tuple[str, str]) -> str:
    text = REFERENCE_TEXT
    for old, new in pairs:
        assert old in text, old
        text = text.replace(old, new)
    return text


def test_prefill_parallelism_must_fit_its_nodes():
    found = _problems(_edit(("prefill: {nodes: 2, tp: 8, pp: 2}", "prefill: {nodes: 1, tp: 8, pp: 2}")))
    assert "tp x pp = 16 GPUs, but 1 node(s) have 8" in found["topology.prefill"]


def test_decode_parallelism_must_fit_its_nodes():
    found = _problems(_edit(("decode: {nodes: 2, dp: 16, ep: 16, tp: 1}", "decode: {nodes: 1, dp: 16, ep: 16, tp: 1}")))
    assert "dp x tp = 16 GPUs" in found["topology.decode"]


def test_tensor_parallel_must_stay_within_a_node():
    found = _problems(_edit(("prefill: {nodes: 2, tp: 8, pp: 2}", "prefill: {nodes: 2, tp: 16, pp: 1}")))
    assert "spans nodes" in found["topology.prefill.tp"]


def test_expert_parallel_must_divide_the_experts():
    found = _problems(_edit(("decode: {nodes: 2, dp: 16, ep: 16, tp: 1}", "decode: {nodes: 2, dp: 12, ep: 12, tp: 1}")))
    assert "does not divide the model's 256 experts" in found["topology.decode.ep"]


def test_decode_tp_below_prefill_tp_is_refused_for_gqa_models():
    gqa = ("    kind: mla\n    layers: 78\n    kv_lora_rank: 512\n    qk_rope_head_dim: 64\n    indexer_head_dim: 128\n",
           "    kind: gqa\n    layers: 80\n    kv_heads: 8\n    head_dim: 128\n")
    found = _problems(_edit(gqa))
    assert "decode tp 1 < prefill tp 8" in found["topology.decode.tp"]


def test_decode_tp_below_prefill_tp_is_fine_for_mla_models():
    parse_blueprint(REFERENCE_TEXT, "bp.yaml")  # the reference itself: MLA, prefill tp8, decode tp1


def test_vllm_pull_nixl_connector_with_prefill_pp_is_refused():
    found = _problems(_edit(("  connector: mooncake\n", "  connector: nixl\n  nixl_mode: pull\n")))
    assert "vllm#52913" in found["kv_transfer.nixl_mode"]
    assert "NixlPushConnector" in found["kv_transfer.nixl_mode"]


def test_vllm_push_nixl_connector_with_prefill_pp_is_accepted():
    parse_blueprint(_edit(("  connector: mooncake\n", "  connector: nixl\n  nixl_mode: push\n")), "bp.yaml")


def test_deepep_all_to_all_on_efa_is_refused():
    found = _problems(_edit(("all2all_backend: uccl_ep", "all2all_backend: deepep_low_latency")))
    assert "IBGDA" in found["engine.all2all_backend"] and "uccl_ep" in found["engine.all2all_backend"]


def test_existing_mode_needs_a_reservation_id():
    found = _problems(_edit(("    mode: odcr\n", "    mode: existing\n")))
    assert "reservation_id" in found["aws.capacity.mode"]


def test_capacity_block_needs_an_upfront_limit():
    found = _problems(_edit(("    mode: odcr\n", "    mode: capacity-block\n")))
    assert "paid upfront" in found["aws.capacity.max_upfront_usd"]


def test_every_zone_needs_a_subnet_in_the_region():
    found = _problems(_edit(("[us-east-2a, us-east-2b, us-east-2c]", "[us-east-2a, us-east-2d, us-west-2a]")))
    assert "us-west-2a is not in region us-east-2" in found["aws.availability_zones"]
    assert "no subnet for zone" in found["aws.subnets"]


def test_scenarios_must_fit_the_context_window():
    found = _problems(_edit(("input_tokens: 120000", "input_tokens: 220000")))
    assert "exceed the model's context" in found["benchmark.scenarios[2].input_tokens"]


def test_baseline_must_name_known_scenarios():
    found = _problems(_edit(("    isl-60k:\n      - {concurrency: 16", "    isl-6ok:\n      - {concurrency: 16")))
    assert "unknown scenario 'isl-6ok'" in found["baseline.scenarios.isl-6ok"]


def test_gate_rules_need_a_bound_unless_report_only():
    found = _problems(_edit(("{metric: tpot_mean, max_ratio: 1.15, critical: true}", "{metric: tpot_mean, critical: true}")))
    assert "has no bound" in found["gate.rules[2]"]


def test_ports_must_be_distinct():
    found = _problems(_edit(("  block_size: 64\n", "  block_size: 64\n  router_port: 8000\n")))
    assert "port 8000 is also prefill_port" in found["engine.router_port"]


def test_rule_problems_carry_the_line_of_their_field():
    text = _edit(("all2all_backend: uccl_ep", "all2all_backend: deepep_low_latency"))
    with pytest.raises(BlueprintError) as info:
        parse_blueprint(text, "bp.yaml")
    (p,) = info.value.problems
    assert p.line == next(i for i, l in enumerate(text.splitlines(), 1) if "all2all_backend" in l)


@pytest.mark.parametrize("image", ["vllm/vllm-openai:v0.22.0", "not an image!!",
                                   "public.ecr.aws/x/vllm@sha256:" + "0" * 63])
def test_the_engine_image_must_be_pinned_by_digest(image):
    pinned = "public.ecr.aws/deep-learning-containers/vllm@sha256:3f1e9c0d5b7a2e4c6d8f0a1b3c5e7d9f1a3b5c7d9e1f3a5b7c9d1e3f5a7b9c1d"
    found = _problems(_edit((pinned, image)))
    assert "is not pinned by digest" in found["engine.image"] and "@sha256:<64 hex>" in found["engine.image"]


def test_a_blueprint_a_rule_refuses_still_names_its_deployment_for_what_only_releases(tmp_path):
    """An older blueprint (its image by tag, from before digests were required) must not keep its
    fleet billing: teardown, status and the sweep load it to release; every run still refuses it."""
    pinned = "public.ecr.aws/deep-learning-containers/vllm@sha256:3f1e9c0d5b7a2e4c6d8f0a1b3c5e7d9f1a3b5c7d9e1f3a5b7c9d1e3f5a7b9c1d"
    path = tmp_path / "older.yaml"
    path.write_text(_edit((pinned, "vllm/vllm-openai:v0.22.0")))
    with pytest.raises(BlueprintError, match="not pinned by digest"):
        load_blueprint(path)
    bp = load_blueprint(path, to_release=True)
    assert bp.name == "glm51-fp8-2p2d" and bp.engine.image == "vllm/vllm-openai:v0.22.0"
    # What is not a blueprint at all stays refused, with its location.
    path.write_text(_edit(("instance_type: p5en.48xlarge", "instance_type: [p5en]")))
    with pytest.raises(BlueprintError, match="instance_type"):
        load_blueprint(path, to_release=True)
