"""`vllm serve MODEL [flags]` (and `python -m vllm.entrypoints.openai.api_server --model M`).

Flags with meaning here: --port, --tensor-parallel-size, --pipeline-parallel-size, --nnodes,
--node-rank, --master-addr, --master-port, --headless, --kv-transfer-config, --kv-cache-dtype,
--block-size, --max-model-len, --max-num-seqs, --served-model-name, --shutdown-timeout, the
--data-parallel-* set. Every other flag of the reference
deployment is accepted and ignored (it tunes GPUs the sandbox does not have). Unknown flags
exit 2 like vLLM's argparse; underscores in flag names are accepted as vLLM does.
"""

from __future__ import annotations

import argparse
import json
import os

from sandbox.engines.config import CONNECTORS, ConfigError, EngineConfig, KvSpec, parse_size

KV_DTYPES = ["auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla"]
KV_ROLES = {"kv_producer": "prefill", "kv_consumer": "decode", "kv_both": "both"}

# Accepted, without effect in the sandbox: (flag names, argparse kwargs).
# Enforced: --api-key (or VLLM_API_KEY), see api.py's bearer check.
_IGNORED: list[tuple[tuple[str, ...], dict]] = [
    (("--host",), {}), (("--uvicorn-log-level",), {}),
    (("--trust-remote-code",), {"action": "store_true"}),
    (("--gpu-memory-utilization",), {"type": float}),
    (("--enable-expert-parallel", "-ep"), {"action": "store_true"}),
    (("--data-parallel-backend", "-dpb"), {}), (("--data-parallel-hybrid-lb",), {"action": "store_true"}),
    (("--api-server-count", "-asc"), {"type": int}), (("--all2all-backend",), {}), (("--moe-backend",), {}),
    (("--load-format",), {}), (("--max-num-batched-tokens",), {"type": int}),
    (("--enable-prefix-caching",), {"action": argparse.BooleanOptionalAction}),
    (("--enable-chunked-prefill",), {"action": argparse.BooleanOptionalAction}),
    (("--download-dir",), {}), (("--dtype",), {}), (("--quantization", "-q"), {}), (("--seed",), {"type": int}),
    (("--disable-log-requests",), {"action": "store_true"}), (("--enable-log-requests",), {"action": "store_true"}),
    (("--disable-log-stats",), {"action": "store_true"}), (("--distributed-executor-backend",), {}),
    (("--enforce-eager",), {"action": "store_true"}), (("--compilation-config", "-O"), {}),
    (("--reasoning-parser",), {}), (("--tool-call-parser",), {}),
    (("--enable-auto-tool-choice",), {"action": "store_true"}), (("--chat-template",), {}),
    (("--tokenizer",), {}), (("--revision",), {}), (("--tokenizer-mode",), {}),
    (("--enable-eplb",), {"action": "store_true"}), (("--eplb-config",), {}),
    (("--async-scheduling",), {"action": "store_true"}), (("--disable-custom-all-reduce",), {"action": "store_true"}),
    (("--enable-dbo",), {"action": "store_true"}), (("--hf-overrides",), {}), (("--model-loader-extra-config",), {}),
    (("--safetensors-load-strategy",), {}), (("--swap-space",), {"type": float}), (("--kv-events-config",), {}),
    (("--intra-node-data-parallel-size",), {"type": int}), (("--cuda-graph-sizes",), {"nargs": "+"}),
    (("--max-cudagraph-capture-size",), {"type": int}), (("--attention-backend",), {}),
    (("--generation-config",), {}), (("--enable-sleep-mode",), {"action": "store_true"}),
]


def _json_arg(text: str) -> dict:
    try:
        value = json.loads(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"invalid JSON {text!r}: {e}") from e
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def build_parser(prog: str = "vllm serve") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, usage=f"{prog} [model_tag] [options]")
    p.add_argument("model_tag", nargs="?")
    p.add_argument("--model")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    p.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    p.add_argument("--nnodes", "-n", type=int, default=1)
    p.add_argument("--node-rank", "-r", type=int, default=0)
    p.add_argument("--master-addr", default="127.0.0.1")
    p.add_argument("--master-port", type=int, default=29501)
    p.add_argument("--headless", action="store_true")
    p.add_argument("--api-key")
    p.add_argument("--kv-transfer-config", type=_json_arg)
    p.add_argument("--speculative-config", type=_json_arg)
    p.add_argument("--kv-cache-dtype", choices=KV_DTYPES, default="auto")
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--max-model-len", type=parse_size, default=202_752)
    p.add_argument("--max-num-seqs", type=int, default=1024)
    p.add_argument("--served-model-name", nargs="+")
    p.add_argument("--shutdown-timeout", type=float, default=0.0)
    p.add_argument("--data-parallel-size", "-dp", type=int, default=1)
    p.add_argument("--data-parallel-size-local", "-dpl", type=int)
    p.add_argument("--data-parallel-start-rank", "-dpr", type=int, default=0)
    p.add_argument("--data-parallel-address", "-dpa")
    p.add_argument("--data-parallel-rpc-port", "-dpp", type=int, default=29550)
    p.add_argument("--data-parallel-external-lb", action="store_true")
    p.add_argument("--data-parallel-multi-port-external-lb", action="store_true")
    p.add_argument("--data-parallel-supervisor-port", type=int, default=0)
    for names, kwargs in _IGNORED:
        p.add_argument(*names, **kwargs)
    return p


def normalize(argv: list[str]) -> list[str]:
    """vLLM's FlexibleArgumentParser accepts --foo_bar for --foo-bar."""
    out = []
    for arg in argv:
        if arg.startswith("--") and "_" in arg.split("=", 1)[0]:
            key, sep, value = arg.partition("=")
            arg = key.replace("_", "-") + sep + value
        out.append(arg)
    return out


def _kv_spec(cfg: dict, env: dict[str, str]) -> tuple[KvSpec | None, str]:
    connector, role = cfg.get("kv_connector"), cfg.get("kv_role")
    if role is not None and role not in KV_ROLES:
        raise ConfigError(f"Unsupported kv_role: {role}. Supported roles are {sorted(KV_ROLES)}")
    if connector is None:
        if role is not None:
            raise ConfigError(f"kv_role={role} is set but kv_connector is not: a disaggregated "
                              "role needs a KV connector in --kv-transfer-config")
        return None, "mixed"
    if role is None:
        raise ConfigError(f"Please specify kv_role when kv_connector is set, supported roles are {sorted(KV_ROLES)}")
    if connector not in CONNECTORS:
        raise ConfigError(f"Connector {connector} is not available in this image "
                          f"(sandbox engines provide {sorted(CONNECTORS)})")
    policy = cfg.get("kv_load_failure_policy", "fail")
    if policy not in ("fail", "recompute"):
        raise ConfigError(f"kv_load_failure_policy must be 'fail' or 'recompute', got {policy!r}")
    extra = cfg.get("kv_connector_extra_config") or {}
    library, _mode = CONNECTORS[connector]
    if library == "mooncake":
        proto = str(extra.get("mooncake_protocol") or env.get("MOONCAKE_PROTOCOL") or "rdma")
        spec = KvSpec("mooncake", connector, proto == "efa", proto, policy)
    else:
        backends = [str(b).upper() for b in extra.get("backends") or ["UCX"]]
        label = "LIBFABRIC" if "LIBFABRIC" in backends else backends[0]
        spec = KvSpec("nixl", connector, label == "LIBFABRIC", label, policy)
    return spec, KV_ROLES[role]


def parse(argv: list[str], env: dict[str, str] | None = None, prog: str = "vllm serve") -> EngineConfig:
    """Parse like vLLM: argparse errors exit 2; refused configurations raise ConfigError."""
    env = dict(os.environ if env is None else env)
    a = build_parser(prog).parse_args(normalize(argv))
    model = a.model or a.model_tag
    if not model:
        raise ConfigError("No model specified: pass MODEL to `vllm serve` or --model")
    kv, role = _kv_spec(a.kv_transfer_config or {}, env)
    if kv and kv.connector == "NixlConnector" and a.pipeline_parallel_size > 1:
        raise ConfigError(
            f"NixlConnector does not support pipeline parallelism (pipeline_parallel_size="
            f"{a.pipeline_parallel_size}); use MooncakeConnector or NixlPushConnector"
        )
    dp_local = a.data_parallel_size_local or a.data_parallel_size
    cfg = EngineConfig(
        engine="vllm", model=model, served_names=a.served_model_name or [model], port=a.port,
        role=role, kv=kv, kv_cache_dtype=a.kv_cache_dtype, block_size=a.block_size,
        tp=a.tensor_parallel_size, pp=a.pipeline_parallel_size, dp=a.data_parallel_size,
        max_model_len=a.max_model_len, max_num_seqs=a.max_num_seqs,
        shutdown_timeout_s=a.shutdown_timeout, serves_api=not a.headless, env=env,
        supervisor_port=a.data_parallel_supervisor_port,
        spec_tokens=int((a.speculative_config or {}).get("num_speculative_tokens") or 0),
        api_key=a.api_key or env.get("VLLM_API_KEY") or None,
    )
    if a.nnodes > 1:
        if not 0 <= a.node_rank < a.nnodes:
            raise ConfigError(f"--node-rank {a.node_rank} is outside 0..{a.nnodes - 1}")
        if a.node_rank > 0 and not a.headless:
            raise ConfigError(f"node rank {a.node_rank} of {a.nnodes} must run with --headless")
        cfg.group_size, cfg.group_rank = a.nnodes, a.node_rank
        cfg.rendezvous_host, cfg.rendezvous_port = a.master_addr, a.master_port
    elif a.data_parallel_size > dp_local:
        if a.data_parallel_size % dp_local or a.data_parallel_start_rank % dp_local:
            raise ConfigError("data parallel size and start rank must be multiples of --data-parallel-size-local")
        if not a.data_parallel_address:
            raise ConfigError("--data-parallel-address is required when data parallelism spans nodes")
        cfg.group_size = a.data_parallel_size // dp_local
        cfg.group_rank = a.data_parallel_start_rank // dp_local
        cfg.rendezvous_host = a.data_parallel_address
        cfg.rendezvous_port = a.data_parallel_rpc_port
    multi_port = a.data_parallel_multi_port_external_lb or a.data_parallel_external_lb
    cfg.api_ports = [a.port + i for i in range(dp_local)] if multi_port and dp_local > 1 else [a.port]
    if kv and role in ("prefill", "both"):
        name = "VLLM_MOONCAKE_BOOTSTRAP_PORT" if kv.library == "mooncake" else "VLLM_NIXL_SIDE_CHANNEL_PORT"
        cfg.bootstrap_port = int(env.get(name) or (8998 if kv.library == "mooncake" else 5600))
    return cfg
