"""Prefill + decode + router stacks, wired the way the reference deployment wires them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from sandbox.engines.harness import EngineProcess, Launcher
from sandbox.nodes import efa_counters
from sandbox.nodes.profiles import profile


@dataclass
class Stack:
    router: str
    prefill: str
    decode: str
    prefill_proc: EngineProcess
    decode_proc: EngineProcess
    router_proc: EngineProcess
    prefill_node: Path  # each engine's node directory, with its EFA counters (efa_counters.read)
    decode_node: Path


def _node(launcher: Launcher, name: str) -> Path:
    """A node directory of its own per engine, EFA counters zeroed, as a booted p5en has them."""
    where = launcher.state_dir / "engine-nodes" / name
    efa_counters.create(where, profile("p5en.48xlarge")["efa_devices"])
    return where


def _kv(role: str, connector: str = "MooncakeConnector", **extra: object) -> str:
    config: dict[str, object] = {"kv_connector": connector, "kv_role": role}
    if connector.startswith("Mooncake"):
        config["kv_connector_extra_config"] = {"mooncake_protocol": "efa"}
    else:
        config["kv_connector_extra_config"] = {"backends": ["LIBFABRIC"]}
    config.update(extra)
    return json.dumps(config)


def vllm_stack(launcher: Launcher, *, prefill_env: dict | None = None, decode_flags: tuple[str, ...] = (),
               connector: str = "MooncakeConnector", decode_kv: dict | None = None,
               decode_env: dict | None = None) -> Stack:
    """vLLM prefill (kv_producer) + decode (kv_consumer) + vllm-router, EFA env on both."""
    pp, dp, bp, rp = (launcher.port() for _ in range(4))
    env = launcher.env(FI_PROVIDER="efa", VLLM_MOONCAKE_BOOTSTRAP_PORT=str(bp), VLLM_NIXL_SIDE_CHANNEL_PORT=str(bp),
                       NIXL_LOG_LEVEL="INFO")
    nodes = _node(launcher, f"prefill-{pp}"), _node(launcher, f"decode-{dp}")
    common = ["--served-model-name", "m", "--trust-remote-code", "--block-size", "64"]
    prefill = launcher.start(
        ["vllm", "serve", "pdlift/tiny", "--port", str(pp), "--kv-cache-dtype", "fp8", *common,
         "--kv-transfer-config", _kv("kv_producer", connector)], "prefill",
        {**env, "PDLIFT_SANDBOX_NODE_DIR": str(nodes[0]), **(prefill_env or {})})
    decode = launcher.start(
        ["vllm", "serve", "pdlift/tiny", "--port", str(dp), "--kv-cache-dtype", "fp8", *common, *decode_flags,
         "--kv-transfer-config", _kv("kv_consumer", connector, **(decode_kv or {}))], "decode",
        {**env, "PDLIFT_SANDBOX_NODE_DIR": str(nodes[1]), **(decode_env or {})})
    router = launcher.start(
        ["vllm-router", "--vllm-pd-disaggregation", "--prefill", f"http://127.0.0.1:{pp}", str(bp),
         "--decode", f"http://127.0.0.1:{dp}", "--kv-connector", "mooncake", "--prefill-policy", "cache_aware",
         "--decode-policy", "power_of_two", "--host", "0.0.0.0", "--port", str(rp)], "router", env)
    return _ready(Stack(f"http://127.0.0.1:{rp}", f"http://127.0.0.1:{pp}", f"http://127.0.0.1:{dp}",
                        prefill, decode, router, *nodes))


def sglang_stack(launcher: Launcher, *, env_extra: dict | None = None, prefill_pp: int = 2,
                 decode_expects_pp: int = 2) -> Stack:
    """SGLang prefill + decode over NIXL (LIBFABRIC from the env) + sglang_router."""
    pp, dp, bp, rp = (launcher.port() for _ in range(4))
    env = launcher.env(FI_PROVIDER="efa", SGLANG_DISAGGREGATION_NIXL_BACKEND="LIBFABRIC", NIXL_LOG_LEVEL="INFO",
                       **(env_extra or {}))
    nodes = _node(launcher, f"prefill-{pp}"), _node(launcher, f"decode-{dp}")
    common = ["--served-model-name", "m", "--trust-remote-code", "--host", "0.0.0.0", "--kv-cache-dtype",
              "fp8_e4m3", "--page-size", "64", "--disaggregation-transfer-backend", "nixl", "--enable-metrics"]
    launch = ["python3", "-m", "sglang.launch_server", "--model-path", "pdlift/tiny"]
    prefill = launcher.start(
        [*launch, *common, "--port", str(pp), "--disaggregation-mode", "prefill", "--tp-size", "8",
         "--pp-size", str(prefill_pp), "--disaggregation-bootstrap-port", str(bp), "--disaggregation-decode-tp", "16",
         "--disaggregation-decode-dp", "16", "--chunked-prefill-size", "16384", "--enable-dynamic-chunking"],
        "prefill", {**env, "PDLIFT_SANDBOX_NODE_DIR": str(nodes[0])})
    decode = launcher.start(
        [*launch, *common, "--port", str(dp), "--disaggregation-mode", "decode", "--tp-size", "16", "--dp-size",
         "16", "--enable-dp-attention", "--ep-size", "16", "--moe-a2a-backend", "deepep", "--deepep-mode",
         "low_latency", "--disaggregation-prefill-pp", str(decode_expects_pp), "--max-running-requests", "256"],
        "decode", {**env, "PDLIFT_SANDBOX_NODE_DIR": str(nodes[1])})
    router = launcher.start(
        ["python", "-m", "sglang_router.launch_router", "--pd-disaggregation", "--prefill",
         f"http://127.0.0.1:{pp}", str(bp), "--decode", f"http://127.0.0.1:{dp}", "--policy", "round_robin",
         "--host", "0.0.0.0", "--port", str(rp)], "router", env)
    return _ready(Stack(f"http://127.0.0.1:{rp}", f"http://127.0.0.1:{pp}", f"http://127.0.0.1:{dp}",
                        prefill, decode, router, *nodes))


def _ready(stack: Stack) -> Stack:
    stack.prefill_proc.wait_http(stack.prefill + "/health")
    stack.decode_proc.wait_http(stack.decode + "/health")
    stack.router_proc.wait_http(stack.router + "/readiness")
    return stack
