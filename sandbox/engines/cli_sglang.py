"""`python -m sglang.launch_server [flags]`.

Flags with meaning here: --model-path, --port, --tp-size, --pp-size, --dp-size,
--dist-init-addr, --nnodes, --node-rank, --disaggregation-mode,
--disaggregation-transfer-backend, --disaggregation-bootstrap-port,
--disaggregation-prefill-pp, --kv-cache-dtype, --page-size, --context-length,
--max-running-requests, --served-model-name, --enable-metrics (without it /metrics is 404, as in
SGLang). The rest of the reference deployment's flags are accepted and ignored; unknown flags
exit 2. Stricter than SGLang in one place, on purpose: a PD mode without an explicit
--disaggregation-transfer-backend is refused (SGLang would default to mooncake), so a rendered
manifest that forgot the KV transfer settings fails loudly instead of working by accident.
"""

from __future__ import annotations

import argparse
import os

from sandbox.engines.config import ConfigError, EngineConfig, KvSpec

KV_DTYPES = ["auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16", "fp4_e2m1"]
TRANSFER_BACKENDS = ["mooncake", "nixl", "ascend", "fake", "mori", "mooncake_tcp"]
A2A_BACKENDS = ["none", "deepep", "mooncake", "nixl", "mori", "ascend_fuseep", "flashinfer", "megamoe",
                "deepep_v2", "pplx", "ascend_tp"]

_IGNORED: list[tuple[tuple[str, ...], dict]] = [
    (("--tokenizer-path",), {}), (("--host",), {}), (("--trust-remote-code",), {"action": "store_true"}),
    (("--ep-size", "--expert-parallel-size", "--ep"), {"type": int}),
    (("--enable-dp-attention",), {"action": "store_true"}),
    (("--disaggregation-decode-tp",), {"type": int}), (("--disaggregation-decode-dp",), {"type": int}),
    (("--disaggregation-ib-device",), {}), (("--moe-a2a-backend",), {"choices": A2A_BACKENDS}),
    (("--deepep-mode",), {"choices": ["normal", "low_latency", "auto"]}),
    (("--chunked-prefill-size",), {"type": int}), (("--enable-dynamic-chunking",), {"action": "store_true"}),
    (("--mem-fraction-static",), {"type": float}), (("--attention-backend",), {}),
    (("--cuda-graph-max-bs",), {"type": int}), (("--max-total-tokens",), {"type": int}),
    (("--watchdog-timeout",), {"type": float}), (("--disable-radix-cache",), {"action": "store_true"}),
    (("--log-level",), {}), (("--load-format",), {}), (("--quantization",), {}), (("--dtype",), {}),
    (("--enable-eplb",), {"action": "store_true"}), (("--ep-num-redundant-experts",), {"type": int}),
    (("--moe-dense-tp-size",), {"type": int}), (("--decode-log-interval",), {"type": int}),
    (("--enable-two-batch-overlap",), {"action": "store_true"}), (("--tool-call-parser",), {}),
    (("--reasoning-parser",), {}), (("--model-loader-extra-config",), {}),
    (("--skip-server-warmup",), {"action": "store_true"}), (("--random-seed",), {"type": int}),
    (("--stream-interval",), {"type": int}), (("--moe-runner-backend",), {}),
    (("--max-prefill-tokens",), {"type": int}), (("--schedule-policy",), {}),
    (("--disable-cuda-graph",), {"action": "store_true"}), (("--enable-cache-report",), {"action": "store_true"}),
    (("--revision",), {}), (("--download-dir",), {}), (("--api-key",), {}), (("--chat-template",), {}),
    (("--disable-shared-experts-fusion",), {"action": "store_true"}),
    (("--disable-chunked-prefix-cache",), {"action": "store_true"}), (("--log-requests",), {"action": "store_true"}),
]


def build_parser(prog: str = "launch_server.py") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog)
    p.add_argument("--model-path", "--model", required=True)
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--tp-size", "--tensor-parallel-size", "--tp", type=int, default=1)
    p.add_argument("--pp-size", "--pipeline-parallel-size", type=int, default=1)
    p.add_argument("--dp-size", "--data-parallel-size", "--dp", type=int, default=1)
    p.add_argument("--dist-init-addr", "--nccl-init-addr")
    p.add_argument("--nnodes", type=int, default=1)
    p.add_argument("--speculative-algorithm", choices=["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"])
    p.add_argument("--speculative-num-steps", type=int)
    p.add_argument("--speculative-eagle-topk", type=int)
    p.add_argument("--speculative-num-draft-tokens", type=int)
    p.add_argument("--node-rank", type=int, default=0)
    p.add_argument("--disaggregation-mode", choices=["null", "prefill", "decode"], default="null")
    p.add_argument("--disaggregation-transfer-backend", choices=TRANSFER_BACKENDS)
    p.add_argument("--disaggregation-bootstrap-port", type=int, default=8998)
    p.add_argument("--disaggregation-prefill-pp", type=int, default=1)
    p.add_argument("--kv-cache-dtype", choices=KV_DTYPES, default="auto")
    p.add_argument("--page-size", type=int, default=1)
    p.add_argument("--context-length", type=int, default=202_752)
    p.add_argument("--max-running-requests", type=int, default=1024)
    p.add_argument("--served-model-name")
    p.add_argument("--enable-metrics", action="store_true")
    for names, kwargs in _IGNORED:
        p.add_argument(*names, **kwargs)
    return p


def _kv_spec(backend: str, env: dict[str, str]) -> KvSpec:
    if backend in ("ascend", "mori"):
        raise ConfigError(f"disaggregation transfer backend {backend!r} is not available on this platform")
    if backend in ("mooncake", "mooncake_tcp"):
        proto = "tcp" if backend == "mooncake_tcp" else env.get("MOONCAKE_PROTOCOL", "rdma")
        return KvSpec("mooncake", backend, proto == "efa", proto)
    if backend == "nixl":
        label = env.get("SGLANG_DISAGGREGATION_NIXL_BACKEND", "UCX").upper()
        return KvSpec("nixl", backend, label == "LIBFABRIC", label)
    return KvSpec("fake", backend, False, "fake")


def parse(argv: list[str], env: dict[str, str] | None = None, prog: str = "launch_server.py") -> EngineConfig:
    env = dict(os.environ if env is None else env)
    a = build_parser(prog).parse_args(argv)
    mode = a.disaggregation_mode
    kv = None
    if mode != "null":
        if not a.disaggregation_transfer_backend:
            raise ConfigError(f"--disaggregation-mode {mode} needs --disaggregation-transfer-backend "
                              "(the sandbox image installs no default KV transfer engine)")
        kv = _kv_spec(a.disaggregation_transfer_backend, env)
    cfg = EngineConfig(
        engine="sglang", model=a.model_path, served_names=[a.served_model_name or a.model_path],
        port=a.port, role=mode if mode != "null" else "mixed", kv=kv, kv_cache_dtype=a.kv_cache_dtype,
        block_size=a.page_size, tp=a.tp_size, pp=a.pp_size, dp=a.dp_size, max_model_len=a.context_length,
        max_num_seqs=a.max_running_requests, metrics_enabled=a.enable_metrics, env=env,
        expect_prefill_pp=a.disaggregation_prefill_pp, api_ports=[a.port],
        spec_tokens=(a.speculative_num_steps or 3) if a.speculative_algorithm else 0,
    )
    if a.nnodes > 1:
        if not a.dist_init_addr or ":" not in a.dist_init_addr:
            raise ConfigError("--dist-init-addr HOST:PORT is required when --nnodes > 1")
        if not 0 <= a.node_rank < a.nnodes:
            raise ConfigError(f"--node-rank {a.node_rank} is outside 0..{a.nnodes - 1}")
        host, _, port = a.dist_init_addr.rpartition(":")
        cfg.group_size, cfg.group_rank = a.nnodes, a.node_rank
        cfg.rendezvous_host, cfg.rendezvous_port = host.strip("[]"), int(port)
        if a.node_rank > 0:  # SGLang's non-zero ranks run only a dummy health-check server
            cfg.serves_api, cfg.health_only_port = False, True
    if kv and mode == "prefill":
        cfg.bootstrap_port = a.disaggregation_bootstrap_port
    return cfg
