"""Memory and KV-cache arithmetic for one serving role. Pure functions, SI units (1 GB = 1e9 B).

Formulas (docs/sources.md#model-kv-bytes):
- weights: parameters x bytes per parameter of the checkpoint dtype.
- KV bytes per token, MLA: layers x (kv_lora_rank + qk_rope_head_dim) x kv bytes, plus the DSA
  indexer keys (layers x indexer_head_dim x kv bytes) when the model has them.
- KV bytes per token, GQA: 2 x layers x kv_heads x head_dim x kv bytes.

Placement across GPUs:
- Pipeline parallel splits layers, so weights and KV per GPU divide by pp.
- Tensor parallel splits dense weights; for MLA the latent cache is replicated on every TP rank
  (there is one latent per token, not one per head), for GQA it splits by KV head.
- Expert parallel splits the routed experts; everything else is replicated per DP rank (/ tp).
"""

from __future__ import annotations

from dataclasses import dataclass

from blueprints.schema import GqaAttention, MlaAttention, ModelSpec

BYTES_PER_ELEMENT = {"fp8": 1.0, "int4": 0.5, "bf16": 2.0, "fp16": 2.0, "fp32": 4.0}

# Held back per GPU for activations, CUDA graphs and the NCCL/EFA buffers. An estimate: engines
# profile this at start-up; 6 GB is what vLLM typically reports for a large MoE at TP8 (note the
# plan prints it so nobody mistakes it for a measurement).
RUNTIME_RESERVE_GB = 6.0


@dataclass(frozen=True)
class RoleMemory:
    role: str
    gpus: int
    weights_gb_per_gpu: float
    usable_gb_per_gpu: float
    kv_free_gb_per_gpu: float
    kv_bytes_per_token_per_gpu: float
    kv_token_capacity_per_replica: int
    replicas: int

    @property
    def fits(self) -> bool:
        return self.kv_free_gb_per_gpu > 0

    def max_sequences(self, context_tokens: int) -> int:
        """Whole sequences of ``context_tokens`` the role can hold in KV cache at once."""
        if not self.fits or context_tokens <= 0:
            return 0
        return (self.kv_token_capacity_per_replica // context_tokens) * self.replicas


def kv_bytes_per_token(model: ModelSpec, kv_dtype: str) -> float:
    """KV-cache bytes one token occupies across all layers of the model."""
    elem = BYTES_PER_ELEMENT[model.dtype if kv_dtype == "auto" else kv_dtype]
    att = model.attention
    if isinstance(att, MlaAttention):
        per_layer = att.kv_lora_rank + att.qk_rope_head_dim + att.indexer_head_dim
        return att.layers * per_layer * elem
    assert isinstance(att, GqaAttention)
    return 2 * att.layers * att.kv_heads * att.head_dim * elem


def weight_bytes(model: ModelSpec) -> tuple[float, float]:
    """(replicated bytes, expert bytes) of the checkpoint."""
    elem = BYTES_PER_ELEMENT[model.dtype]
    total = model.total_params_b * 1e9 * elem
    if model.experts and model.expert_params_b is not None:
        expert = model.expert_params_b * 1e9 * elem
        return total - expert, expert
    return total, 0.0


def kv_split(model: ModelSpec, tp: int) -> int:
    """How many ways one token's KV is split across a TP group."""
    if isinstance(model.attention, MlaAttention):
        return 1
    return min(tp, model.attention.kv_heads)


def prefill_memory(model: ModelSpec, kv_dtype: str, tp: int, pp: int, gpu_gb: float,
                   utilization: float) -> RoleMemory:
    dense, expert = weight_bytes(model)
    per_gpu = (dense + expert) / (tp * pp)  # prefill shards every weight over tp x pp
    kv_tok = kv_bytes_per_token(model, kv_dtype) / pp / kv_split(model, tp)
    return _role("prefill", tp * pp, per_gpu, kv_tok, gpu_gb, utilization, replicas=1)


def decode_memory(model: ModelSpec, kv_dtype: str, dp: int, ep: int, tp: int, gpu_gb: float,
                  utilization: float) -> RoleMemory:
    dense, expert = weight_bytes(model)
    per_gpu = dense / tp + expert / max(ep, 1) if expert else (dense + expert) / (tp * max(ep, 1))
    kv_tok = kv_bytes_per_token(model, kv_dtype) / kv_split(model, tp)
    return _role("decode", dp * tp, per_gpu, kv_tok, gpu_gb, utilization, replicas=dp)


def _role(role: str, gpus: int, weights_per_gpu: float, kv_tok_per_gpu: float, gpu_gb: float,
          utilization: float, replicas: int) -> RoleMemory:
    usable = gpu_gb * utilization
    free = usable - weights_per_gpu / 1e9 - RUNTIME_RESERVE_GB
    # The quotient rounded, then truncated: with pp 3 the bytes per token per GPU are a rounded
    # float (7168/3), and a floor division of the floats came out one token short (23437499).
    capacity = int(free * 1e9 / kv_tok_per_gpu) if free > 0 else 0
    return RoleMemory(role, gpus, weights_per_gpu / 1e9, usable, free, kv_tok_per_gpu, capacity, replicas)


def kv_transfer_seconds(model: ModelSpec, kv_dtype: str, input_tokens: int, gbps: float) -> float:
    """Time to move one request's KV cache prefill -> decode at ``gbps`` usable Gbit/s."""
    return kv_bytes_per_token(model, kv_dtype) * input_tokens * 8 / (gbps * 1e9)
