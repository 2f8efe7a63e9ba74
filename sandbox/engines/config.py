"""What an engine command line means, once parsed: one shape for vLLM and SGLang.

The KV protocol resolves like the real transfer engines do, silently (kv-path-proof.md):
- Mooncake asks for EFA with ``mooncake_protocol: efa`` (vLLM kv_connector_extra_config) or
  ``MOONCAKE_PROTOCOL=efa`` (env; SGLang). The EFA build installs its EFA transport; an image
  with the generic wheel (the ``tcp_fallback`` fault) ignores the protocol, discovers 0 HCAs
  and listens on TCP, with no error (transfer_engine_impl.cpp, tcp_transport.cpp).
- NIXL asks for EFA with the ``LIBFABRIC`` backend (vLLM ``kv_connector_extra_config.backends``
  or ``SGLANG_DISAGGREGATION_NIXL_BACKEND``). libfabric picks efa when the devices are there,
  else tcp (``LibfabricUtils::getAvailableNetworkDevices``: cxi > efa > tcp > sockets), unless
  ``FI_PROVIDER=efa`` pins it, which turns the fallback into a start-up failure. UCX, NIXL's
  default, has no EFA transport here.
Only the start-up log lines (NIXL's at ``NIXL_LOG_LEVEL=INFO``) and the node's EFA counters tell.
"""

from __future__ import annotations

import os
import time
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
        provider = env.get("FI_PROVIDER", "")
        if not self.asks_efa or tcp_fallback:
            return "tcp"
        if self.library == "nixl" and provider not in ("", "efa"):
            return "tcp"  # libfabric was told to use another provider
        return "efa"

    def start_failure(self, env: dict[str, str], tcp_fallback: bool) -> str | None:
        """Why the engine cannot start: NIXL's LIBFABRIC with FI_PROVIDER=efa and no usable EFA.
        (The sandbox's wording; libfabric's own error names the provider the same way.)"""
        if self.library == "nixl" and self.asks_efa and tcp_fallback and env.get("FI_PROVIDER") == "efa":
            return ("NIXL LIBFABRIC backend: no fabric found for provider efa (FI_PROVIDER=efa): "
                    "fi_getinfo: No data available")
        return None

    def startup_lines(self, protocol: str, env: dict[str, str], devices: int = 16) -> list[str]:
        """The lines the transfer engine prints at start (sources in kv-path-proof.md), in the
        glog/absl form of the C++ libraries (``I1202 08:00:00.000000 1 file.cpp:N] text``)."""
        if self.library == "mooncake":
            lines = []
            if self.connector == "MooncakeConnector":  # vLLM mooncake_connector.py: the *requested* one
                lines.append(f"The Mooncake Transfer Engine is using {self.backend} as its protocol.")
            if protocol == "efa":
                lines += [_glog("transfer_engine_impl.cpp", "Installing EFA transport as requested by protocol "
                                                            "parameter"),
                          _glog("efa_transport.cpp", "[EFA] AWS Elastic Fabric Adapter transport initialized")]
                lines += [_glog("efa_transport.cpp", f"EfaTransport: Initialized EFA device {d}")
                          for d in ("rdmap79s0", "rdmap80s0")[:devices]]
                lines.append(_glog("transfer_engine_impl.cpp", "EFA transport installed successfully"))
            else:  # the generic wheel: the protocol is ignored and auto-discovery finds no HCA
                lines += [_glog("transfer_engine_impl.cpp", "Topology discovery complete. Found 0 HCAs."),
                          _glog("tcp_transport.cpp", "TcpTransport: listen on port 15428")]
            return lines
        lines = [f"Backend {self.backend} was instantiated"]  # nixl/_api.py create_backend
        if self.connector == "nixl":  # SGLang's NIXL KV manager
            lines.insert(0, f"NIXL KVManager initialized with backend: {self.backend}")
        verbose = env.get("NIXL_LOG_LEVEL", "WARN").upper() in ("INFO", "DEBUG", "TRACE")
        if self.backend == "LIBFABRIC" and verbose:
            if protocol == "efa":
                lines += [_glog("libfabric_topology.cpp", f"Discovered {devices} EFA devices"),
                          _glog("libfabric_rail_manager.cpp", f"Created {devices} rails using provider=efa")]
            else:
                lines += [_glog("libfabric_topology.cpp", "Discovered 1 tcp devices (TCP fallback)"),
                          _glog("libfabric_rail_manager.cpp", "Created 1 rails using provider=tcp")]
        return lines


def _glog(source: str, text: str) -> str:
    return f"I{time.strftime('%m%d %H:%M:%S')}.000000 {os.getpid()} {source}:120] {text}"


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
    # vLLM --api-key, else the VLLM_API_KEY environment variable (vllm/entrypoints/openai/cli_args.py,
    # vllm/envs.py): /v1 routes need "Authorization: Bearer <key>" (api.py's bearer check)
    api_key: str | None = None
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
