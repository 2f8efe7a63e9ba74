"""SGLang prefill and decode command lines (docs/sources.md#sglang-multinode). Pure.

Both roles run one SGLang instance per LWS group: ``--nnodes N --node-rank R
--dist-init-addr LEADER:5000``. Prefill: TP inside a node, PP across nodes, told the decode
layout. Decode: DP attention + EP across nodes (``--tp-size`` is the total GPU count, as SGLang
counts it with ``--enable-dp-attention``), told the prefill PP size. Ranks above 0 answer only
``/health``, so their template probes that.
"""

from __future__ import annotations

from blueprints.schema import Blueprint
from tasks.errors import ConfigError
from tasks.planning.manifests import common
from tasks.planning.manifests import kv
from tasks.planning.manifests.cmdline import Line, Sh
from tasks.planning.manifests.pods import RoleSpec
from tasks.planning.manifests.vllm import DTYPES, all2all_note, check_extra_args

KV_CACHE_DTYPES = {"auto": "auto", "fp8": "fp8_e4m3", "bf16": "bf16"}  # SGLang has no fp16 cache
# Blueprint all2all backend -> (--moe-a2a-backend, --deepep-mode). UCCL-EP replaces DeepEP
# under its name, as for vLLM.
A2A = {"uccl_ep": ("deepep", "low_latency"), "deepep_low_latency": ("deepep", "low_latency"),
       "deepep_high_throughput": ("deepep", "normal"), "deepep": ("deepep", "auto"),
       "naive": ("none", None), "allgather_reducescatter": ("none", None)}


def kv_cache_dtype(bp: Blueprint) -> str:
    try:
        return KV_CACHE_DTYPES[bp.engine.kv_cache_dtype]
    except KeyError:
        raise ConfigError(f"SGLang has no {bp.engine.kv_cache_dtype} KV cache; set engine.kv_cache_dtype "
                          "to auto (the model's dtype), fp8 or bf16") from None


def _lines(bp: Blueprint, port: int, nodes: int, leader: bool, parallel: list[Line],
           settings: kv.KvSettings) -> list[Line]:
    e = bp.engine
    lines: list[Line] = [
        ("python3", "-m", "sglang.launch_server"), ("--model-path", common.model_dir(bp)),
        ("--served-model-name", bp.model.name), ("--host", "0.0.0.0"), ("--port", str(port)),
        ("--trust-remote-code",), ("--dtype", DTYPES[bp.model.dtype]),
        ("--kv-cache-dtype", kv_cache_dtype(bp)), ("--page-size", str(e.block_size)),
        # SGLang's static fraction (weights + KV pool) is the closest to vLLM's utilization.
        ("--mem-fraction-static", str(e.gpu_memory_utilization)),
        ("--context-length", str(bp.model.max_context)), *parallel]
    if nodes > 1:
        rank = "0" if leader else Sh('"$LWS_WORKER_INDEX"')
        lines.append(("--nnodes", str(nodes), "--node-rank", rank,
                      "--dist-init-addr", Sh(f'"$LWS_LEADER_ADDRESS:{common.SGLANG_DIST_PORT}"')))
    lines += [tuple(settings.args), ("--enable-metrics",)]
    extra = check_extra_args(e.extra_args, lines)
    return lines + ([tuple(extra)] if extra else [])


def _sglang_decode_tp(bp: Blueprint) -> int:
    d = bp.topology.decode
    return d.dp * d.tp


def prefill(bp: Blueprint) -> RoleSpec:
    p, d, port = bp.topology.prefill, bp.topology.decode, bp.engine.prefill_port
    if (p.tp * p.pp) % p.nodes:
        raise ConfigError(f"prefill tp x pp = {p.tp * p.pp} GPUs cannot split evenly over {p.nodes} nodes")
    parallel: list[Line] = [("--tp-size", str(p.tp), "--pp-size", str(p.pp)),
                            ("--disaggregation-decode-tp", str(_sglang_decode_tp(bp)),
                             "--disaggregation-decode-dp", str(d.dp))]
    settings = kv.sglang_kv(bp, common.PREFILL)
    return RoleSpec(common.PREFILL, "sglang", _lines(bp, port, p.nodes, True, parallel, settings),
                    _lines(bp, port, p.nodes, False, parallel, settings), settings.env, port,
                    bp.engine.bootstrap_port, settings.privileged, "/health", "/health", "/health",
                    _annotations(bp, common.PREFILL), expose_bootstrap=True)


def decode(bp: Blueprint) -> RoleSpec:
    p, d, port = bp.topology.prefill, bp.topology.decode, bp.engine.decode_port
    parallel: list[Line] = [("--tp-size", str(_sglang_decode_tp(bp)))]
    if d.dp > 1:
        parallel.append(("--dp-size", str(d.dp), "--enable-dp-attention"))
    env: list[dict] = []
    if d.ep > 1:
        backend, mode = A2A[bp.engine.all2all_backend]
        moe: Line = ("--ep-size", str(d.ep), "--moe-a2a-backend", backend)
        parallel.append(moe + (("--deepep-mode", mode) if mode else ()))
        env = common.env_list({"NVIDIA_GDRCOPY": "enabled"})
    parallel.append(("--disaggregation-prefill-pp", str(p.pp)))
    settings = kv.sglang_kv(bp, common.DECODE)
    return RoleSpec(common.DECODE, "sglang", _lines(bp, port, d.nodes, True, parallel, settings),
                    _lines(bp, port, d.nodes, False, parallel, settings), env + settings.env, port,
                    None, settings.privileged, "/health", "/health", "/health", _annotations(bp, common.DECODE))


def _annotations(bp: Blueprint, role: str) -> dict[str, str]:
    out = {"pdlift.io/kv-transfer": f"sglang {bp.kv_transfer.connector} over {bp.kv_transfer.protocol}"}
    if role == common.DECODE and bp.topology.decode.ep > 1:
        backend, mode = A2A[bp.engine.all2all_backend]
        out["pdlift.io/all2all"] = all2all_note(bp.engine.all2all_backend, f"{backend}/{mode or 'none'}")
    return out
