"""vLLM prefill and decode command lines (docs/sources.md#vllm-multinode). Pure.

Prefill: TP inside a node, PP across the group's nodes with vLLM's multi-node mode (no Ray):
``--nnodes N --node-rank R --master-addr LEADER``, workers ``--headless``.
Decode: DP + EP across nodes with the internal load balancer: the leader serves HTTP for all
DP ranks, workers run ``--headless`` with ``--data-parallel-start-rank WORKER_INDEX*local``.
"""

from __future__ import annotations

from blueprints.schema import Blueprint
from tasks.errors import ConfigError
from tasks.planning.manifests import common
from tasks.planning.manifests import kv
from tasks.planning.manifests.cmdline import Line, Sh
from tasks.planning.manifests.pods import RoleSpec

LEADER_ADDRESS = Sh('"$LWS_LEADER_ADDRESS"')
WORKER_INDEX = Sh('"$LWS_WORKER_INDEX"')
KV_CACHE_DTYPES = {"auto": "auto", "fp8": "fp8", "bf16": "bfloat16"}  # the blueprint's choices (vLLM's CacheDType also has float16)
# Quantized checkpoints (fp8, int4) compute activations in bf16; the quantization method
# itself comes from the checkpoint's config.json.
DTYPES = {"fp8": "bfloat16", "bf16": "bfloat16", "int4": "bfloat16", "fp16": "float16", "fp32": "float32"}
# Blueprint all2all backend -> vLLM --all2all-backend. UCCL-EP is a drop-in DeepEP for EFA:
# vLLM keeps DeepEP's backend names and the image's deep_ep module is the UCCL-EP wrapper.
ALL2ALL = {"uccl_ep": "deepep_low_latency", "deepep_low_latency": "deepep_low_latency",
           "deepep_high_throughput": "deepep_high_throughput", "deepep": "deepep_low_latency",
           "naive": "naive", "allgather_reducescatter": "allgather_reducescatter"}


def kv_cache_dtype(bp: Blueprint) -> str:
    try:
        return KV_CACHE_DTYPES[bp.engine.kv_cache_dtype]
    except KeyError:
        raise ConfigError(f"vLLM has no {bp.engine.kv_cache_dtype} KV cache; set engine.kv_cache_dtype "
                          "to auto (the model's dtype), fp8 or bf16") from None


def _common(bp: Blueprint, port: int) -> list[Line]:
    e = bp.engine
    return [("vllm", "serve", common.model_dir(bp)), ("--served-model-name", bp.model.name),
            ("--host", "0.0.0.0"), ("--port", str(port)), ("--trust-remote-code",),
            ("--dtype", DTYPES[bp.model.dtype]), ("--kv-cache-dtype", kv_cache_dtype(bp)),
            ("--block-size", str(e.block_size)), ("--gpu-memory-utilization", str(e.gpu_memory_utilization)),
            ("--max-model-len", str(bp.model.max_context))]


def _tail(bp: Blueprint, settings: kv.KvSettings, rendered: list[Line]) -> list[Line]:
    lines: list[Line] = [tuple(settings.args), ("--shutdown-timeout", str(common.SHUTDOWN_TIMEOUT_S))]
    extra = check_extra_args(bp.engine.extra_args, rendered + lines)
    return lines + ([tuple(extra)] if extra else [])


def check_extra_args(extra: list[str], rendered: list[Line]) -> list[str]:
    """engine.extra_args may add flags, never override one pdlift derives from the blueprint
    (an override would slip past the prefill/decode invariants' intent)."""
    owned = {str(t) for line in rendered for t in line if isinstance(t, str) and t.startswith("--")}
    for arg in extra:
        name = arg.split("=", 1)[0].replace("_", "-")
        if name in owned:
            raise ConfigError(f"engine.extra_args sets {name}, which pdlift renders from the blueprint; "
                              "change the blueprint field instead")
    return list(extra)


def prefill(bp: Blueprint) -> RoleSpec:
    p, port = bp.topology.prefill, bp.engine.prefill_port
    if (p.tp * p.pp) % p.nodes:
        raise ConfigError(f"prefill tp x pp = {p.tp * p.pp} GPUs cannot split evenly over {p.nodes} nodes")
    base = _common(bp, port) + [("--tensor-parallel-size", str(p.tp)), ("--pipeline-parallel-size", str(p.pp))]
    leader, worker = list(base), list(base)
    if p.nodes > 1:
        group = ("--nnodes", str(p.nodes))
        master = ("--master-addr", LEADER_ADDRESS, "--master-port", str(common.PP_MASTER_PORT))
        leader += [group + ("--node-rank", "0") + master]
        worker += [group + ("--node-rank", WORKER_INDEX) + master, ("--headless",)]
    settings = kv.vllm_kv(bp, common.PREFILL)
    return RoleSpec(common.PREFILL, "vllm", leader + _tail(bp, settings, leader), worker + _tail(bp, settings, worker),
                    settings.env, port, bp.engine.bootstrap_port, settings.privileged,
                    "/health", "/v1/models", None, _annotations(bp, common.PREFILL),
                    expose_bootstrap=settings.router_bootstrap, worker_bootstrap=not settings.router_bootstrap)


def decode(bp: Blueprint) -> RoleSpec:
    d, port = bp.topology.decode, bp.engine.decode_port
    if d.dp % d.nodes:
        raise ConfigError(f"decode dp {d.dp} cannot split evenly over {d.nodes} nodes")
    local = d.dp // d.nodes
    base = _common(bp, port) + [("--tensor-parallel-size", str(d.tp))]
    if d.dp > 1:
        base.append(("--data-parallel-size", str(d.dp), "--data-parallel-size-local", str(local)))
    leader, worker = list(base), list(base)
    if d.nodes > 1:
        address = ("--data-parallel-address", LEADER_ADDRESS, "--data-parallel-rpc-port", str(common.DP_RPC_PORT))
        leader += [("--data-parallel-start-rank", "0") + address]
        worker += [("--data-parallel-start-rank", Sh(f"$((LWS_WORKER_INDEX*{local}))")) + address,
                   ("--headless",)]
    env: list[dict] = []
    if d.ep > 1:
        moe = ("--enable-expert-parallel", "--all2all-backend", ALL2ALL[bp.engine.all2all_backend])
        leader.append(moe)
        worker.append(moe)
        # llm-d / Dynamo wide-EP decode settings; GDRCopy is what DeepEP-style kernels use.
        env = common.env_list({"VLLM_USE_DEEP_GEMM": "1", "VLLM_SKIP_P2P_CHECK": "1",
                          "VLLM_RANDOMIZE_DP_DUMMY_INPUTS": "1", "NVIDIA_GDRCOPY": "enabled"})
    settings = kv.vllm_kv(bp, common.DECODE)
    return RoleSpec(common.DECODE, "vllm", leader + _tail(bp, settings, leader), worker + _tail(bp, settings, worker),
                    env + settings.env, port, None if settings.router_bootstrap else bp.engine.bootstrap_port,
                    settings.privileged, "/health", "/v1/models", None, _annotations(bp, common.DECODE),
                    worker_bootstrap=not settings.router_bootstrap)


def _annotations(bp: Blueprint, role: str) -> dict[str, str]:
    kvt = bp.kv_transfer
    out = {"pdlift.io/kv-transfer": f"{kv.vllm_connector(bp)} over {kvt.protocol}"}
    if role == common.DECODE and bp.topology.decode.ep > 1:
        out["pdlift.io/all2all"] = all2all_note(bp.engine.all2all_backend, ALL2ALL[bp.engine.all2all_backend])
    return out


def all2all_note(backend: str, rendered: str) -> str:
    if backend == "uccl_ep":
        return (f"uccl-ep: engine backend {rendered} served by the UCCL-EP deep_ep wrapper "
                "(uccl-project/uccl ep/); the image must ship it")
    return f"{backend}: engine backend {rendered}"
