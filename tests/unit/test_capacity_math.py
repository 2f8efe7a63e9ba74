"""Planning numbers against hand computations written out here."""

from pathlib import Path

import pytest

from blueprints.loader import load_blueprint
from tasks.planning import capacity_math as cm
from tasks.planning.plan import make_plan

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "blueprints" / "glm51-fp8-2p2d.yaml"


@pytest.fixture(scope="module")
def glm():
    return load_blueprint(REFERENCE)


def test_prefill_weights_per_gpu_are_754e9_fp8_bytes_over_tp8_pp2(glm):
    plan = make_plan(glm)
    prefill = plan.roles[0]
    assert prefill["role"] == "prefill"
    assert prefill["weights_gb_per_gpu"] == pytest.approx(754e9 / 16 / 1e9, abs=0.01)  # 47.125 GB
    assert round(prefill["weights_gb_per_gpu"], 1) == 47.1  # the figure


def test_decode_weights_replicate_dense_and_shard_experts_over_ep16(glm):
    plan = make_plan(glm)
    decode = plan.roles[1]
    dense_gb = 754 - 725  # everything that is not a routed expert, replicated per DP rank (tp=1)
    assert decode["weights_gb_per_gpu"] == pytest.approx(dense_gb + 725 / 16, abs=0.01)  # 74.31


def test_mla_kv_per_token_is_layers_times_latent_plus_rope_plus_indexer_bytes(glm):
    # 78 x (512 + 64) x 1 byte = 44,928 for the latent; + 78 x 128 x 1 for the DSA indexer keys
    assert cm.kv_bytes_per_token(glm.model, "fp8") == 78 * (512 + 64) + 78 * 128 == 54_912
    assert cm.kv_bytes_per_token(glm.model, "bf16") == 2 * 54_912


def test_gqa_kv_per_token_is_two_times_layers_heads_dim_bytes(glm):
    from blueprints.schema import GqaAttention

    llama = glm.model.model_copy(update={
        "dtype": "bf16", "attention": GqaAttention(kind="gqa", layers=80, kv_heads=8, head_dim=128)})
    assert cm.kv_bytes_per_token(llama, "auto") == 2 * 80 * 8 * 128 * 2 == 327_680


def test_kv_cache_left_per_gpu_is_usable_memory_minus_weights_minus_reserve(glm):
    plan = make_plan(glm)
    prefill = plan.roles[0]
    usable = 141 * 0.90
    assert prefill["usable_gb_per_gpu"] == pytest.approx(usable, abs=0.01)
    assert prefill["kv_free_gb_per_gpu"] == pytest.approx(usable - 754 / 16 - cm.RUNTIME_RESERVE_GB, abs=0.01)


def test_decode_holds_112_sequences_of_120k_context(glm):
    plan = make_plan(glm)
    s120 = next(s for s in plan.scenarios if s.scenario == "isl-120k")
    free_bytes = (141 * 0.9 - (29 + 725 / 16) - cm.RUNTIME_RESERVE_GB) * 1e9
    per_rank = int(free_bytes // 54_912) // (120_000 + 512)
    assert s120.decode_max_sequences == per_rank * 16 == 112


def test_kv_transfer_of_a_120k_request_takes_tens_of_ms_over_efa(glm):
    plan = make_plan(glm)
    s120 = next(s for s in plan.scenarios if s.scenario == "isl-120k")
    expected_ms = 54_912 * 120_000 * 8 / (2400e9) * 1000  # 6.59 GB over 2.4 Tbit/s usable
    assert s120.kv_transfer_ms == pytest.approx(expected_ms, abs=0.01)
    assert s120.kv_gb_per_request == pytest.approx(6.59, abs=0.01)


def test_kv_over_tcp_is_planned_100x_slower_and_warned(glm):
    tcp = glm.model_copy(update={"kv_transfer": glm.kv_transfer.model_copy(update={"protocol": "tcp"})})
    efa_ms = make_plan(glm).scenarios[0].kv_transfer_ms
    plan = make_plan(tcp)
    assert plan.scenarios[0].kv_transfer_ms == pytest.approx(efa_ms * 100, rel=0.01)
    assert any("TCP" in w for w in plan.warnings)


def test_fleet_costs_four_p5en_at_63_296_per_hour(glm):
    cost = make_plan(glm).cost
    assert cost.usd_per_hour == pytest.approx(4 * 63.296, abs=0.01)
    # A run costs its projected length (tests/unit/test_plan_timeline.py), not a number the blueprint supplies.
    assert cost.usd_per_run == pytest.approx(4 * 63.296 * make_plan(glm).timeline.expected_s / 3600, abs=0.01)
    assert "4110" in cost.price_source


def test_blueprint_price_override_wins_over_the_table(glm):
    cheaper = glm.model_copy(update={"aws": glm.aws.model_copy(update={"hourly_price_usd": 50.0})})
    assert make_plan(cheaper).cost.usd_per_hour == 200.0


def test_a_model_too_big_for_the_gpus_is_warned_as_not_fitting(glm):
    huge = glm.model_copy(update={"model": glm.model.model_copy(
        update={"dtype": "bf16", "total_params_b": 1500, "expert_params_b": 1400})})
    plan = make_plan(huge)
    assert not plan.roles[0]["fits"]
    assert any("prefill does not fit" in w for w in plan.warnings)


def test_small_model_at_low_concurrency_says_pd_is_probably_not_worth_it(glm):
    from blueprints.schema import Scenario

    small = glm.model_copy(update={
        "model": glm.model.model_copy(update={"total_params_b": 8, "active_params_b": 8, "experts": 0,
                                              "expert_params_b": None}),
        "benchmark": glm.benchmark.model_copy(update={"scenarios": [
            Scenario(name="chat", input_tokens=2000, output_tokens=200, concurrencies=[1, 4], duration_s=60)]}),
    })
    assert any("not worth it" in w for w in make_plan(small).warnings)
    assert not any("not worth it" in w for w in make_plan(glm).warnings)


def test_hourly_cost_above_the_blueprint_limit_is_warned(glm):
    tight = glm.model_copy(update={"aws": glm.aws.model_copy(update={
        "capacity": glm.aws.capacity.model_copy(update={"max_hourly_usd": 100.0})})})
    assert any("max_hourly_usd" in w for w in make_plan(tight).warnings)


def test_the_plan_says_what_a_blue_green_rollout_onto_the_fleet_needs(glm):
    [note] = [w for w in make_plan(glm).warnings if w.startswith("blue/green")]
    assert "needs 4 more p5en.48xlarge nodes (+$253.18/h while both colours run)" in note


def test_mooncake_over_efa_is_warned_that_the_image_needs_its_efa_build(glm):
    """The generic Mooncake wheels are built without EFA (kvcache-ai/Mooncake#2070): the plan says
    so for a Mooncake stack over EFA, and not for NIXL or for Mooncake over TCP."""
    def plan_with(**kv):
        return make_plan(glm.model_copy(update={"kv_transfer": glm.kv_transfer.model_copy(update=kv)}))

    efa_build = "mooncake-transfer-engine-efa"
    mooncake = [w for w in plan_with(connector="mooncake", protocol="efa").warnings if efa_build in w]
    assert len(mooncake) == 1 and glm.engine.image in mooncake[0]
    assert not any(efa_build in w for w in plan_with(connector="nixl", protocol="efa").warnings)
    assert not any(efa_build in w for w in plan_with(connector="mooncake", protocol="tcp").warnings)
