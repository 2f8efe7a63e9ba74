"""What an engine command line means, once parsed: one shape for vLLM and SGLang.

The KV protocol resolves like the real transfer engines do, silently:
- Mooncake asks for EFA with ``mooncake_protocol: efa`` (vLLM kv_connector_extra_config) or
  ``MOONCAKE_PROTOCOL=efa`` (env; SGLang); NIXL asks for it with the ``LIBFABRIC`` backend
  (vLLM ``kv_connector_extra_config.backends`` or ``SGLANG_DISAGGREGATION_NIXL_BACKEND``).
- The protocol is ``efa`` only if the config asks for it AND ``FI_PROVIDER=efa`` is in the
  env AND the ``tcp_fallback`` fault is off. Anything else (NIXL's default UCX, Mooncake's
  default rdma on a host without InfiniBand, libfabric picking its tcp provider) is ``tcp``,
  with no error: only the start-up log lines and the metrics tell.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

CONNECTORS = {  # vLLM connector class -> (transfer library, mode)
    "MooncakeConnector": ("mooncake", "pull"),
    "NixlConnector": ("nixl", "pull"),
    "NixlPushConnector": ("nixl", "push"),
}


class ConfigError(Exception):
    """An engine configuration the real engine refuses at start (exit 1 with the message)."""


@dataclass
class KvSpec:
    library: str  # "mooncake" | "nixl"
    connector: str  # vLLM class name, or the SGLang backend name
    asks_efa: bool
    backend: str  # what the log names: "efa"/"rdma"/"tcp" for Mooncake, "LIBFABRIC"/"UCX" for NIXL
    load_failure_policy: str = "fail"

    def resolve(self, env: dict[str, str], tcp_fallback: bool) -> str:
        if self.asks_efa and env.get("FI_PROVIDER") == "efa" and not tcp_fallback:
            return "efa"
        return "tcp"

    def startup_lines(self, protocol: str) -> list[str]:
        if self.library == "mooncake":
            return [f"Mooncake transfer engine protocol: {protocol}"]
        lines = [f"Backend {self.backend} was instantiated"]
        if self.backend == "LIBFABRIC":
            lines.append(
                "NIXL LIBFABRIC: using EFA device (libfabric) provider efa" if protocol == "efa"
                else "NIXL LIBFABRIC: libfabric selected provider tcp"
            )
        else:
            lines.append(f"NIXL {self.backend}: transports selected: {protocol}")
        return lines


@dataclass
class EngineConfig:
    engine: str  # "vllm" | "sglang"
    model: str
    served_names: list[str]
    port: int
    role: str  # "prefill" | "decode" | "both" | "mixed"
    kv: KvSpec | None
    kv_cache_dtype: str
    block_size: int
    tp: int = 1
    pp: int = 1
    dp: int = 1
    max_model_len: int = 202_752
    max_num_seqs: int = 256
    shutdown_timeout_s: float = 0.0
    metrics_enabled: bool = True
    # multi-node group: size, this node's rank, the leader's rendezvous address
    group_size: int = 1
    group_rank: int = 0
    rendezvous_host: str = ""
    rendezvous_port: int = 0
    serves_api: bool = True  # False: vLLM --headless, SGLang node-rank > 0
    health_only_port: bool = False  # SGLang node-rank > 0 answers /health on --port
    api_ports: list[int] = field(default_factory=list)  # vLLM multi-port external LB
    supervisor_port: int = 0
    bootstrap_port: int = 0  # the KV bootstrap / side-channel port a prefill serves
    expect_prefill_pp: int = 1  # SGLang decode --disaggregation-prefill-pp
    spec_tokens: int = 0  # speculative decoding: tokens drafted per step (0: off)
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))

    @property
    def is_leader(self) -> bool:
        return self.group_rank == 0

    def compat(self) -> dict[str, object]:
        """What must agree between prefill and decode (vLLM's compatibility hash, in spirit)."""
        dtype = "fp8_e4m3" if self.kv_cache_dtype == "fp8" else self.kv_cache_dtype
        compat: dict[str, object] = {
            "engine": self.engine,
            "library": self.kv.library if self.kv else None,
            "model": self.model,
            "kv_cache_dtype": dtype,
            "block_size": self.block_size,
        }
        if self.engine == "sglang":  # decode must be told the prefill's PP layout
            compat["prefill_pp"] = self.pp if self.role == "prefill" else self.expect_prefill_pp
        return compat


def parse_size(text: str) -> int:
    """vLLM accepts human-readable sizes for --max-model-len: 128k = 128000, 128K = 131072."""
    text = text.strip()
    scale = {"k": 1000, "m": 1000_000, "K": 1024, "M": 1024 * 1024}.get(text[-1:], 1)
    number = text[:-1] if scale != 1 else text
    return int(float(number) * scale)
