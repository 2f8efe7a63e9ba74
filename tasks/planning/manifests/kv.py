"""The KV-transfer configuration per engine, connector and protocol (docs/sources.md#kv-transfer-settings). Pure.

``protocol: efa`` asks each transfer engine for EFA explicitly (Mooncake ``efa``, NIXL
``LIBFABRIC``): every default falls back to TCP without an error. ``protocol: tcp`` renders
the TCP equivalents on purpose (the plan warns that TTFT then suffers); NCCL keeps the EFA
environment either way, since pipeline and expert traffic are not KV transfer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from blueprints.schema import Blueprint
from tasks.planning.manifests.common import DECODE, PREFILL, field_env

VLLM_CONNECTORS = {("mooncake", "pull"): "MooncakeConnector", ("mooncake", "push"): "MooncakeConnector",
                   ("nixl", "pull"): "NixlConnector", ("nixl", "push"): "NixlPushConnector"}
VLLM_ROLES = {PREFILL: "kv_producer", DECODE: "kv_consumer"}
ROUTER_CONNECTOR = {"mooncake": "mooncake", "nixl": "nixl"}  # vllm-router --kv-connector


@dataclass(frozen=True)
class KvSettings:
    args: list[str]  # engine flags
    env: list[dict] = field(default_factory=list)
    privileged: bool = False  # NIXL registers VRAM through libfabric
    router_bootstrap: bool = True  # the router passes the prefill's bootstrap port


def vllm_connector(bp: Blueprint) -> str:
    return VLLM_CONNECTORS[(bp.kv_transfer.connector, bp.kv_transfer.nixl_mode)]


def vllm_kv(bp: Blueprint, role: str) -> KvSettings:
    kv, efa = bp.kv_transfer, bp.kv_transfer.protocol == "efa"
    config: dict = {"kv_connector": vllm_connector(bp), "kv_role": VLLM_ROLES[role],
                    "kv_load_failure_policy": "fail"}  # never recompute silently on decode
    env: list[dict] = []
    if kv.connector == "mooncake":
        config["kv_connector_extra_config"] = {"mooncake_protocol": "efa" if efa else "tcp"}
        if role == PREFILL:
            env += [{"name": "VLLM_MOONCAKE_BOOTSTRAP_PORT", "value": str(bp.engine.bootstrap_port)},
                    {"name": "VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT", "value": "480"}]
        return KvSettings(["--kv-transfer-config", _json(config)], env)
    config["kv_buffer_device"] = "cuda"
    config["kv_connector_extra_config"] = {"backends": ["LIBFABRIC" if efa else "UCX"]}
    env += nixl_log_env(efa)
    # Without the side-channel host NIXL advertises an unroutable address (llm-d#650).
    env += [field_env("VLLM_NIXL_SIDE_CHANNEL_HOST", "status.podIP"),
            {"name": "VLLM_NIXL_SIDE_CHANNEL_PORT", "value": str(bp.engine.bootstrap_port)}]
    if not efa:
        env.append({"name": "UCX_TLS", "value": "tcp,cuda_copy"})
    # The prefill hands its side channel to decode in kv_transfer_params: no router bootstrap.
    return KvSettings(["--kv-transfer-config", _json(config)], env, privileged=efa, router_bootstrap=False)


def sglang_kv(bp: Blueprint, role: str) -> KvSettings:
    kv, efa = bp.kv_transfer, bp.kv_transfer.protocol == "efa"
    args = ["--disaggregation-mode", role, "--disaggregation-transfer-backend", kv.connector]
    if role == PREFILL:
        args += ["--disaggregation-bootstrap-port", str(bp.engine.bootstrap_port)]
    if kv.connector == "mooncake":  # MOONCAKE_PROTOCOL=efa needs SGLang with PR #25083
        return KvSettings(args, [{"name": "MOONCAKE_PROTOCOL", "value": "efa" if efa else "tcp"}])
    env = [{"name": "SGLANG_DISAGGREGATION_NIXL_BACKEND", "value": "LIBFABRIC" if efa else "UCX"}, *nixl_log_env(efa)]
    if not efa:
        env.append({"name": "UCX_TLS", "value": "tcp,cuda_copy"})
    return KvSettings(args, env, privileged=efa)


def nixl_log_env(efa: bool) -> list[dict]:
    """NIXL's libfabric backend names the provider it chose ("Created 16 rails using
    provider=efa", libfabric_rail_manager.cpp) only at INFO; the default level is WARN. The
    canary reads that line: "Backend LIBFABRIC was instantiated" alone does not prove EFA."""
    return [{"name": "NIXL_LOG_LEVEL", "value": "INFO"}] if efa else []


def _json(config: dict) -> str:
    return json.dumps(config, separators=(",", ":"))
