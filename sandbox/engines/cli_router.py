"""`vllm-router ...` and `python -m sglang_router.launch_router ...` command lines.

Both routers descend from sgl-router and share most flags. Meaningful here: --host, --port,
--pd-disaggregation / --vllm-pd-disaggregation, --prefill URL [BOOTSTRAP_PORT] (repeatable),
--decode URL (repeatable), --worker-urls (plain mode), --policy / --prefill-policy /
--decode-policy, --kv-connector (vllm-router), --intra-node-data-parallel-size (vllm-router:
each URL stands for that many ports), --health-check-interval-secs. Kubernetes service
discovery is refused at start: the sandbox router has no in-cluster API access.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from sandbox.engines.config import ConfigError

POLICIES = ["random", "round_robin", "cache_aware", "power_of_two", "consistent_hash"]


@dataclass
class RouterConfig:
    flavour: str  # "vllm" | "sglang"
    port: int
    pd: bool
    prefill: list[tuple[str, int | None]] = field(default_factory=list)
    decode: list[str] = field(default_factory=list)
    workers: list[str] = field(default_factory=list)
    prefill_policy: str = "round_robin"
    decode_policy: str = "round_robin"
    kv_connector: str = ""
    dp_size: int = 1
    health_interval_s: float = 1.0


def build_parser(flavour: str) -> argparse.ArgumentParser:
    prog = "vllm-router" if flavour == "vllm" else "launch_router.py"
    p = argparse.ArgumentParser(prog=prog)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--worker-urls", nargs="*", default=[])
    p.add_argument("--policy", choices=POLICIES, default="cache_aware")
    p.add_argument("--prefill-policy", choices=POLICIES)
    p.add_argument("--decode-policy", choices=POLICIES)
    p.add_argument("--prefill", nargs="+", action="append", default=[], metavar="URL [BOOTSTRAP_PORT]")
    p.add_argument("--decode", nargs=1, action="append", default=[], metavar="URL")
    if flavour == "vllm":
        p.add_argument("--vllm-pd-disaggregation", action="store_true")
        p.add_argument("--pd-disaggregation", action="store_true")
        p.add_argument("--kv-connector", choices=["mooncake", "nixl", "nixlv2", "p2p_nccl", "lmcache"])
        p.add_argument("--intra-node-data-parallel-size", type=int, default=1)
    else:
        p.add_argument("--pd-disaggregation", action="store_true")
    p.add_argument("--service-discovery", action="store_true")
    p.add_argument("--selector", nargs="*")
    p.add_argument("--prefill-selector", nargs="*")
    p.add_argument("--decode-selector", nargs="*")
    p.add_argument("--service-discovery-port", type=int)
    p.add_argument("--service-discovery-namespace")
    for flag in ("--worker-startup-timeout-secs", "--worker-startup-check-interval", "--max-payload-size",
                 "--request-timeout-secs", "--prometheus-port", "--max-concurrent-requests",
                 "--retry-max-retries", "--health-check-timeout-secs"):
        p.add_argument(flag, type=int)
    p.add_argument("--health-check-interval-secs", type=float, default=1.0)
    for flag in ("--log-level", "--prometheus-host", "--api-key", "--log-dir", "--health-check-endpoint"):
        p.add_argument(flag)
    for flag in ("--dp-aware", "--disable-retries", "--disable-circuit-breaker"):
        p.add_argument(flag, action="store_true")
    p.add_argument("--request-id-headers", nargs="*")
    p.add_argument("--cors-allowed-origins", nargs="*")
    return p


def parse(argv: list[str], flavour: str) -> RouterConfig:
    a = build_parser(flavour).parse_args(argv)
    pd = a.pd_disaggregation or getattr(a, "vllm_pd_disaggregation", False)
    if a.service_discovery:
        raise ConfigError("service discovery needs in-cluster Kubernetes API access, which the sandbox "
                          "router does not have; pass --prefill/--decode URLs instead")
    cfg = RouterConfig(
        flavour=flavour, port=a.port, pd=pd, workers=list(a.worker_urls),
        prefill_policy=a.prefill_policy or a.policy, decode_policy=a.decode_policy or a.policy,
        kv_connector=getattr(a, "kv_connector", None) or "", dp_size=getattr(a, "intra_node_data_parallel_size", 1),
        health_interval_s=max(0.2, a.health_check_interval_secs),
    )
    for item in a.prefill:
        if len(item) > 2:
            raise ConfigError(f"--prefill takes URL [BOOTSTRAP_PORT], got {item}")
        port = None
        if len(item) == 2 and item[1].lower() != "none":
            try:
                port = int(item[1])
            except ValueError as e:
                raise ConfigError(f"invalid bootstrap port {item[1]!r} for {item[0]}") from e
        cfg.prefill.append((item[0], port))
    cfg.decode = [item[0] for item in a.decode]
    if pd and (not cfg.prefill or not cfg.decode):
        raise ConfigError("PD disaggregation mode needs at least one --prefill and one --decode worker")
    if not pd and not cfg.workers:
        raise ConfigError("no workers: pass --worker-urls, or --pd-disaggregation with --prefill/--decode")
    return cfg
