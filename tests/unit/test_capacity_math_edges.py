"""Capacity arithmetic at its edges (``tasks.planning.capacity_math``): what a role that does not
fit holds, dense models, the KV cache dtype, and the figures a plan prints per role."""

from __future__ import annotations

import pytest

from blueprints.schema import GqaAttention, MlaAttention, ModelSpec
from tasks.planning import capacity_math as cm

GQA = GqaAttention(kind="gqa", layers=32, kv_heads=8, head_dim=128)
MLA = MlaAttention(kind="mla", layers=10, kv_lora_rank=512, qk_rope_head_dim=64)


def model(**update) -> ModelSpec:
    base = dict(name="m", total_params_b=8.0, active_params_b=8.0, dtype="bf16", weights_uri="s3://bucket/m/",
                max_context=131072, attention=GQA, source="test")
    return ModelSpec(**{**base, **update})


def role(kv_free_gb: float, capacity: int = 1000, replicas: int = 2) -> cm.RoleMemory:
    return cm.RoleMemory("decode", 8, 10.0, 120.0, kv_free_gb, 1.0, capacity, replicas)


def test_a_role_with_exactly_no_kv_memory_left_does_not_fit_and_holds_no_sequence():
    empty = role(0.0)
    assert not empty.fits
    assert empty.max_sequences(10) == 0


def test_a_role_short_of_memory_does_not_fit_even_by_a_little():
    assert not role(-0.5).fits
    assert role(0.001).fits


def test_whole_sequences_per_replica_times_the_replicas():
    assert role(1.0, capacity=1000, replicas=2).max_sequences(300) == 3 * 2  # 1000 // 300 = 3 per replica
    assert role(1.0, capacity=1000, replicas=1).max_sequences(1000) == 1
    assert role(1.0, capacity=999, replicas=1).max_sequences(1000) == 0


@pytest.mark.parametrize("context", [0, -1])
def test_a_context_of_no_tokens_holds_no_sequence(context):
    assert role(1.0).max_sequences(context) == 0


def test_a_dense_model_replicates_nothing_as_experts():
    assert cm.weight_bytes(model()) == (8e9 * 2, 0.0)


def test_a_moe_model_without_an_expert_figure_is_treated_as_dense():
    assert cm.weight_bytes(model(experts=64, expert_params_b=None)) == (8e9 * 2, 0.0)


def test_a_moe_model_splits_its_bytes_into_replicated_and_expert_weights():
    dense, expert = cm.weight_bytes(model(experts=64, expert_params_b=6.0))
    assert (dense, expert) == (pytest.approx(2e9 * 2), pytest.approx(6e9 * 2))


def test_a_checkpoint_with_experts_but_none_declared_has_no_expert_bytes():
    assert cm.weight_bytes(model(experts=0, expert_params_b=6.0)) == (8e9 * 2, 0.0)


def test_the_kv_cache_dtype_overrides_the_checkpoints_and_auto_follows_it():
    per_token_bf16 = 2 * 32 * 8 * 128 * 2
    assert cm.kv_bytes_per_token(model(dtype="bf16"), "auto") == per_token_bf16
    assert cm.kv_bytes_per_token(model(dtype="bf16"), "fp8") == per_token_bf16 / 2
    assert cm.kv_bytes_per_token(model(dtype="fp8"), "auto") == per_token_bf16 / 2
    assert cm.kv_bytes_per_token(model(dtype="bf16"), "fp32") == per_token_bf16 * 2


def test_mla_without_an_indexer_caches_the_latent_and_the_rope_key_only():
    assert cm.kv_bytes_per_token(model(attention=MLA), "fp8") == 10 * (512 + 64)


def test_gqa_kv_splits_over_tp_up_to_its_kv_heads():
    assert [cm.kv_split(model(), tp) for tp in (1, 2, 8, 16)] == [1, 2, 8, 8]
    assert cm.kv_split(model(attention=MLA), 8) == 1


def test_prefill_shards_every_weight_over_tp_times_pp_and_counts_its_gpus():
    m = model(total_params_b=80.0, active_params_b=80.0)
    r = cm.prefill_memory(m, "auto", tp=4, pp=2, gpu_gb=80.0, utilization=0.5)
    assert r.role == "prefill" and r.gpus == 8 and r.replicas == 1
    assert r.weights_gb_per_gpu == pytest.approx(80 * 2 / 8)                    # 20 GB
    assert r.usable_gb_per_gpu == pytest.approx(40.0)
    assert r.kv_free_gb_per_gpu == pytest.approx(40.0 - 20.0 - cm.RUNTIME_RESERVE_GB)
    per_token = 2 * 32 * 8 * 128 * 2 / 2 / 4                                    # / pp / kv split
    assert r.kv_bytes_per_token_per_gpu == pytest.approx(per_token)
    assert r.kv_token_capacity_per_replica == 854_492                            # 14e9 B // 16384 B, whole tokens


def test_decode_shards_experts_over_ep_and_replicates_the_rest_per_tp_group():
    m = model(total_params_b=100.0, active_params_b=10.0, experts=64, expert_params_b=80.0)
    r = cm.decode_memory(m, "auto", dp=4, ep=8, tp=2, gpu_gb=141.0, utilization=0.9)
    assert r.role == "decode" and r.gpus == 8 and r.replicas == 4
    assert r.weights_gb_per_gpu == pytest.approx(20 * 2 / 2 + 80 * 2 / 8)       # 20 + 20 GB
    assert r.kv_bytes_per_token_per_gpu == pytest.approx(2 * 32 * 8 * 128 * 2 / 2)


def test_decode_of_a_dense_model_shards_its_weights_over_tp_and_ep():
    r = cm.decode_memory(model(), "auto", dp=2, ep=2, tp=2, gpu_gb=80.0, utilization=1.0)
    assert r.weights_gb_per_gpu == pytest.approx(16.0 / 4)
    without_ep = cm.decode_memory(model(), "auto", dp=2, ep=0, tp=2, gpu_gb=80.0, utilization=1.0)
    assert without_ep.weights_gb_per_gpu == pytest.approx(16.0 / 2)


def test_decode_with_ep_below_one_keeps_the_experts_on_one_gpu():
    m = model(total_params_b=100.0, active_params_b=10.0, experts=64, expert_params_b=80.0)
    r = cm.decode_memory(m, "auto", dp=1, ep=0, tp=1, gpu_gb=1000.0, utilization=1.0)
    assert r.weights_gb_per_gpu == pytest.approx(200.0)


def test_a_role_whose_weights_leave_no_room_holds_no_kv_tokens():
    huge = model(total_params_b=400.0, active_params_b=400.0)
    r = cm.prefill_memory(huge, "auto", tp=1, pp=1, gpu_gb=80.0, utilization=0.9)
    assert not r.fits
    assert r.kv_token_capacity_per_replica == 0
    assert r.kv_free_gb_per_gpu == pytest.approx(72.0 - 800.0 - cm.RUNTIME_RESERVE_GB)


def test_kv_transfer_time_is_the_requests_kv_bits_over_the_link():
    per_token = 2 * 32 * 8 * 128 * 2
    assert cm.kv_transfer_seconds(model(), "auto", 1000, 100.0) == pytest.approx(per_token * 1000 * 8 / 100e9)


# --- whole bytes and whole tokens ---------------------------------------------------------------

TINY_KV = GqaAttention(kind="gqa", layers=1, kv_heads=1, head_dim=1)  # 2 x 1 x 1 x 1 x 4 B = 8 B per token


def fp32_model(**update) -> ModelSpec:
    return model(dtype="fp32", total_params_b=80.0, active_params_b=80.0, attention=TINY_KV, **update)


def test_a_context_of_one_token_holds_one_sequence_per_token_of_capacity():
    assert role(1.0, capacity=1000, replicas=2).max_sequences(1) == 2000


def test_gigabytes_are_10_to_the_9_bytes_exactly():
    assert cm.weight_bytes(model(experts=64, expert_params_b=6.0)) == (4e9, 12e9)
    r = cm.prefill_memory(fp32_model(), "auto", tp=8, pp=1, gpu_gb=80.0, utilization=1.0)
    assert r.weights_gb_per_gpu == 40.0                      # 80e9 parameters x 4 B / 8 GPUs
    assert r.kv_free_gb_per_gpu == 80.0 - 40.0 - cm.RUNTIME_RESERVE_GB


def test_the_kv_capacity_is_the_whole_tokens_the_free_bytes_hold():
    r = cm.prefill_memory(fp32_model(), "auto", tp=8, pp=1, gpu_gb=80.0, utilization=1.0)
    assert r.kv_bytes_per_token_per_gpu == 8.0
    assert r.kv_token_capacity_per_replica == 34_000_000_000 // 8


def test_half_a_gigabyte_free_still_holds_tokens():
    r = cm.prefill_memory(fp32_model(), "auto", tp=8, pp=1, gpu_gb=46.5, utilization=1.0)
    assert r.kv_free_gb_per_gpu == 0.5 and r.kv_token_capacity_per_replica == 500_000_000 // 8


def test_kv_transfer_time_counts_gigabits_as_10_to_the_9_bits():
    assert cm.kv_transfer_seconds(fp32_model(), "auto", 1000, 8.0) == 8.0 * 1000 * 8 / 8e9


def test_a_pipeline_of_three_stages_holds_its_exact_whole_tokens():
    # 2 x 28 layers x 4 KV heads x 128 x 1 B (fp8) = 7168 B per token, / pp 3 / tp 4 per GPU;
    # 56 GB free hold exactly 56e9 x 12 / 7168 = 93,750,000 / 4 = 23,437,500 tokens
    m = model(total_params_b=120.0, active_params_b=120.0, dtype="fp8",
              attention=GqaAttention(kind="gqa", layers=28, kv_heads=4, head_dim=128))
    r = cm.prefill_memory(m, "auto", tp=4, pp=3, gpu_gb=80.0, utilization=0.9)
    assert r.kv_free_gb_per_gpu == pytest.approx(56.0)
    assert r.kv_token_capacity_per_replica == 23_437_500
