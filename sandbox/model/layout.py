"""The checkpoint's tensors: names and shapes of an MLA MoE model, widths sized to a target."""

from __future__ import annotations

import math
from dataclasses import dataclass

DTYPE_BYTES = {"F8_E4M3": 1, "BF16": 2, "F32": 4}
QUANT_BLOCK = 128  # FP8 block quantisation: one F32 scale per 128 x 128 block
# Shard headers plus the index take about this much JSON per tensor (there are ~120k tensors).
_JSON_BYTES_PER_TENSOR = 220


@dataclass(frozen=True)
class ModelShape:
    """What the blueprint fixes about the model (defaults: blueprints/sandbox-2p2d.yaml)."""

    layers: int = 78
    dense_layers: int = 3
    experts: int = 256
    shared_experts: int = 1
    experts_per_token: int = 8
    kv_lora_rank: int = 512
    qk_rope_head_dim: int = 64
    qk_nope_head_dim: int = 192
    v_head_dim: int = 256
    index_head_dim: int = 128
    max_context: int = 202752
    name: str = "pdlift/tiny-moe-mla"

    @classmethod
    def from_blueprint(cls, bp) -> ModelShape:
        att = bp.model.attention
        return cls(layers=att.layers, experts=bp.model.experts or 1,
                   kv_lora_rank=att.kv_lora_rank, qk_rope_head_dim=att.qk_rope_head_dim,
                   index_head_dim=att.indexer_head_dim or 128,
                   max_context=bp.model.max_context, name=bp.model.name)


@dataclass(frozen=True)
class Dims:
    """The widths chosen to hit the target size."""

    hidden: int
    heads: int
    q_lora: int
    moe_inter: int
    inter: int
    vocab: int = 1024
    index_heads: int = 4


@dataclass(frozen=True)
class Tensor:
    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * DTYPE_BYTES[self.dtype]


def _fp8(name: str, rows: int, cols: int) -> list[Tensor]:
    scale = (math.ceil(rows / QUANT_BLOCK), math.ceil(cols / QUANT_BLOCK))
    return [Tensor(f"{name}.weight", "F8_E4M3", (rows, cols)),
            Tensor(f"{name}.weight_scale_inv", "F32", scale)]


def _norm(name: str, size: int) -> Tensor:
    return Tensor(f"{name}.weight", "BF16", (size,))


def _mlp(prefix: str, inter: int, hidden: int) -> list[Tensor]:
    return (_fp8(f"{prefix}.gate_proj", inter, hidden) + _fp8(f"{prefix}.up_proj", inter, hidden)
            + _fp8(f"{prefix}.down_proj", hidden, inter))


def layer_tensors(shape: ModelShape, d: Dims, i: int) -> list[Tensor]:
    p, h = f"model.layers.{i}", d.hidden
    a = f"{p}.self_attn"
    out = [_norm(f"{p}.input_layernorm", h), _norm(f"{p}.post_attention_layernorm", h)]
    out += _fp8(f"{a}.q_a_proj", d.q_lora, h) + [_norm(f"{a}.q_a_layernorm", d.q_lora)]
    out += _fp8(f"{a}.q_b_proj", d.heads * (shape.qk_nope_head_dim + shape.qk_rope_head_dim),
                d.q_lora)
    out += _fp8(f"{a}.kv_a_proj_with_mqa", shape.kv_lora_rank + shape.qk_rope_head_dim, h)
    out += [_norm(f"{a}.kv_a_layernorm", shape.kv_lora_rank)]
    out += _fp8(f"{a}.kv_b_proj", d.heads * (shape.qk_nope_head_dim + shape.v_head_dim),
                shape.kv_lora_rank)
    out += _fp8(f"{a}.o_proj", h, d.heads * shape.v_head_dim)
    out += _fp8(f"{a}.indexer.wq_b", d.index_heads * shape.index_head_dim, d.q_lora)
    out += _fp8(f"{a}.indexer.wk", shape.index_head_dim, h)
    out += [_norm(f"{a}.indexer.k_norm", shape.index_head_dim),
            Tensor(f"{a}.indexer.weights_proj.weight", "BF16", (d.index_heads, h))]
    if i < shape.dense_layers:
        return out + _mlp(f"{p}.mlp", d.inter, h)
    out += [Tensor(f"{p}.mlp.gate.weight", "BF16", (shape.experts, h)),
            Tensor(f"{p}.mlp.gate.e_score_correction_bias", "F32", (shape.experts,))]
    for e in range(shape.experts):
        out += _mlp(f"{p}.mlp.experts.{e}", d.moe_inter, h)
    return out + _mlp(f"{p}.mlp.shared_experts", d.moe_inter * shape.shared_experts, h)


def all_tensors(shape: ModelShape, d: Dims) -> list[Tensor]:
    out = [Tensor("model.embed_tokens.weight", "BF16", (d.vocab, d.hidden))]
    for i in range(shape.layers):
        out += layer_tensors(shape, d, i)
    return out + [_norm("model.norm", d.hidden),
                  Tensor("lm_head.weight", "BF16", (d.vocab, d.hidden))]


def _dims(hidden: int, moe_inter: int) -> Dims:
    return Dims(hidden=hidden, heads=max(1, hidden // 96), q_lora=hidden,
                moe_inter=moe_inter, inter=4 * moe_inter)


def model_bytes(shape: ModelShape, d: Dims) -> int:
    """Total tensor bytes, from one dense and one MoE layer (all layers of a kind are alike)."""
    def size(ts: list[Tensor]) -> int:
        return sum(t.nbytes for t in ts)

    top = 2 * d.vocab * d.hidden * DTYPE_BYTES["BF16"] + d.hidden * DTYPE_BYTES["BF16"]
    dense = min(shape.dense_layers, shape.layers)
    moe = shape.layers - dense
    return (top + dense * size(layer_tensors(shape, d, 0))
            + (moe and moe * size(layer_tensors(shape, d, dense))))


def tensor_count(shape: ModelShape) -> int:
    d = _dims(64, 8)
    dense = min(shape.dense_layers, shape.layers)
    return (3 + dense * len(layer_tensors(shape, d, 0))
            + (shape.layers - dense) * len(layer_tensors(shape, d, dense)))


def plan_dims(shape: ModelShape, target_bytes: int) -> Dims:
    """The widest hidden size whose expert width still fills most of the target size (below
    about 85 MB, the fixed layout of 78 layers x 256 experts is the floor)."""
    target_bytes -= tensor_count(shape) * _JSON_BYTES_PER_TENSOR
    widths = (4096, 2048, 1024, 512, 256, 128, 64)
    for hidden in widths:
        fixed = model_bytes(shape, _dims(hidden, 8))
        if fixed <= 0.5 * target_bytes or hidden == widths[-1]:
            per_unit = model_bytes(shape, _dims(hidden, 9)) - fixed  # per unit of expert width
            return _dims(hidden, 8 + max(0, round((target_bytes - fixed) / per_unit)))
    raise AssertionError("unreachable: the last width always returns")


def config(shape: ModelShape, d: Dims) -> dict:
    return {
        "architectures": ["GlmMoeDsaForCausalLM"], "model_type": "glm_moe_dsa",
        "_name_or_path": shape.name, "torch_dtype": "bfloat16",
        "num_hidden_layers": shape.layers, "first_k_dense_replace": shape.dense_layers,
        "hidden_size": d.hidden, "intermediate_size": d.inter,
        "moe_intermediate_size": d.moe_inter, "n_routed_experts": shape.experts,
        "n_shared_experts": shape.shared_experts, "num_experts_per_tok": shape.experts_per_token,
        "num_attention_heads": d.heads, "num_key_value_heads": d.heads,
        "q_lora_rank": d.q_lora, "kv_lora_rank": shape.kv_lora_rank,
        "qk_rope_head_dim": shape.qk_rope_head_dim, "qk_nope_head_dim": shape.qk_nope_head_dim,
        "v_head_dim": shape.v_head_dim, "index_head_dim": shape.index_head_dim,
        "index_n_heads": d.index_heads, "index_topk": 2048,
        "max_position_embeddings": shape.max_context, "vocab_size": d.vocab,
        "rms_norm_eps": 1e-5, "rope_theta": 1000000.0, "tie_word_embeddings": False,
        "bos_token_id": 256, "eos_token_id": 256, "pad_token_id": 256,
        "quantization_config": {"quant_method": "fp8", "fmt": "e4m3",
                                "activation_scheme": "dynamic",
                                "weight_block_size": [QUANT_BLOCK, QUANT_BLOCK]},
    }
