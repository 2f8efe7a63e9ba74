"""Prove the KV data path: one long, unique prompt through the candidate's router, judged by what
stock engines and the EFA devices count. Pure.

A wrong transfer setting silently falls back to TCP and TTFT regresses (docs/sources.md#efa-tcp-fallback),
so the configuration is not evidence. Three kinds of evidence are, each from something a real
p5en node and a stock engine image have (kv-path-proof.md):

1. **The fabric's own counters** (``protocol: efa``): the EFA device byte counters of the prefill
   nodes and of the decode nodes (``/sys/class/infiniband/rdmap*/ports/1/hw_counters/``, summed
   over the devices) each grow by at least ``MIN_FABRIC_SHARE`` x the canary's KV bytes (the
   model's KV bytes per token x the prompt). KV over TCP leaves them flat: it goes through ENA.
2. **The engine counted a load, not a recompute.**
   - vLLM: decode's ``vllm:prompt_tokens_by_source_total`` grows with ``source="external_kv_transfer"``
     for all of the prompt but at most one block, which it may compute (``local_compute``), and
     ``vllm:nixl_num_failed_transfers`` / ``vllm:mooncake_num_failed_transfers`` (where the build
     has them) do not move.
   - SGLang (``--enable-metrics``): the ``sglang:per_stage_req_latency_seconds`` counts of
     ``prefill_transfer_kv_cache`` (prefill) and ``decode_transferred`` (decode) each grow, and
     ``sglang:num_transfer_failed_reqs_total`` / ``num_bootstrap_failed_reqs_total`` do not.
   The prompt starts with a nonce, so no prefix cache can answer for the transfer.
3. **The transport the engines' logs name** (``protocol: efa``): NIXL's LIBFABRIC backend at
   ``NIXL_LOG_LEVEL=INFO`` logs "Created N rails using provider=efa" ("Backend LIBFABRIC was
   instantiated" alone does not prove EFA: libfabric falls back to tcp); Mooncake's EFA build logs
   "EFA transport installed successfully", while the generic wheels (built without EFA) log
   "TcpTransport: listen on port" or "Installing TCP transport".

An engine with no evidence of a kind fails the canary: without a count there is no proof.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass

from tasks.parsing.prometheus import Sample

# Below this share of the canary's KV on the EFA counters, the KV did not go over EFA.
MIN_FABRIC_SHARE = 0.9
DEFAULT_TOKENS = 16384
BY_SOURCE = "vllm:prompt_tokens_by_source_total"
VLLM_FAILED = ("vllm:nixl_num_failed_transfers", "vllm:mooncake_num_failed_transfers")
SGLANG_STAGES = "sglang:per_stage_req_latency_seconds_count"
SGLANG_STAGE = {"prefill": "prefill_transfer_kv_cache", "decode": "decode_transferred"}
SGLANG_FAILED = ("sglang:num_transfer_failed_reqs_total", "sglang:num_bootstrap_failed_reqs_total")
MOONCAKE_EFA_BUILD = ("the image needs the EFA build of the Mooncake Transfer Engine (mooncake-transfer-engine-efa "
                      "or -efa-cuda13; the generic wheels are built without EFA)")
_NIXL_RAILS = re.compile(r"Created (\d+) rails using provider=([a-z0-9_]+)")
_NIXL_TCP = re.compile(r"Discovered \d+ (?:tcp|sockets) devices \(TCP fallback\)")
_MOONCAKE_EFA = "EFA transport installed successfully"
_MOONCAKE_TCP = ("Installing TCP transport", "TcpTransport: listen on port", "MC_FORCE_TCP is set")
# Common one-token English words: the prompt's length in tokens is close to its word count
# under any BPE tokenizer, and no two canaries share a prefix (a nonce comes first).
_WORDS = ("the model reads a long prompt and the cache moves from prefill to decode over the fabric "
          "while each node keeps its own copy of the weights on local disk").split()
ROLES = ("prefill", "decode")


@dataclass(frozen=True)
class CanarySpec:
    """What the blueprint says the canary should see."""
    engine: str              # vllm | sglang
    connector: str           # mooncake | nixl
    protocol: str            # efa | tcp
    prompt_tokens: int
    kv_bytes: float          # the canary's KV: the model's KV bytes per token x prompt_tokens
    block_size: int
    ttft_bound_s: float


@dataclass(frozen=True)
class RoleEvidence:
    """One role's leaders' metrics before and after the canary, their engine log, and the EFA
    byte counters of every node the role runs on, summed (None: they could not be read)."""
    before: list[Sample]
    after: list[Sample]
    log: str = ""
    fabric_before: int | None = None
    fabric_after: int | None = None
    fabric_note: str = ""    # why the counters could not be read

    @property
    def fabric_moved(self) -> int | None:
        if self.fabric_before is None or self.fabric_after is None:
            return None
        return self.fabric_after - self.fabric_before


@dataclass(frozen=True)
class CanaryReport:
    prompt_tokens: int
    ttft_s: float
    ttft_bound_s: float
    kv_bytes: float
    fabric_moved: dict[str, int | None]  # role -> EFA bytes counted during the canary
    loaded_tokens: float     # prompt tokens decode loaded over the connector (vLLM), transfers (SGLang)
    computed_tokens: float   # prompt tokens decode computed itself (vLLM)
    transport: dict[str, str]  # role -> what the logs name ("efa", "tcp", "" unknown)
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        fabric = ", ".join(f"{role} nodes' EFA counters +{_fmt(v)}" for role, v in self.fabric_moved.items()
                           if v is not None) or ("EFA counters not read" if self.fabric_moved else
                                                 "no EFA counters judged (protocol tcp)")
        logs = ", ".join(f"{role} log: {t or 'no transport named'}" for role, t in self.transport.items())
        head = (f"canary ({self.prompt_tokens} prompt tokens, KV {_fmt(self.kv_bytes)}): TTFT "
                f"{self.ttft_s * 1000:.0f} ms (bound {self.ttft_bound_s * 1000:.0f} ms); {fabric}; "
                f"decode loaded {self.loaded_tokens:.0f}, computed {self.computed_tokens:.0f}; {logs}")
        return head if self.ok else head + "\n  " + "\n  ".join(self.problems)


def canary_prompt(tokens: int) -> str:
    words = [f"canary-{secrets.token_hex(4)}"]
    words += [_WORDS[i % len(_WORDS)] for i in range(max(tokens - 1, 0))]
    return " ".join(words)


def canary_tokens(max_context: int, wanted: int | None = None) -> int:
    """Long enough that its KV is megabytes, short enough to fit the context with room to answer."""
    return max(256, min(wanted or DEFAULT_TOKENS, max_context // 2))


def _total(samples: Iterable[Sample], name: str, **labels: str) -> float | None:
    """The sum of ``name``'s samples with ``labels`` (a counter read with or without ``_total``);
    None when no such sample exists."""
    names = {name, name + "_total"} if not name.endswith("_total") else {name}
    values = [s.value for s in samples if s.name in names and all(s.labels.get(k) == v for k, v in labels.items())]
    return sum(values) if values else None


def _change(ev: RoleEvidence, name: str, **labels: str) -> float | None:
    after = _total(ev.after, name, **labels)
    if after is None:
        return None
    return after - (_total(ev.before, name, **labels) or 0.0)


def _fabric(spec: CanarySpec, evidence: dict[str, RoleEvidence]) -> list[str]:
    problems = []
    need = MIN_FABRIC_SHARE * spec.kv_bytes
    for role in ROLES:
        ev = evidence[role]
        moved = ev.fabric_moved
        if moved is None:
            problems.append(f"the EFA counters of the {role} nodes could not be read ({ev.fabric_note or 'no reading'}): "
                            "the KV path cannot be proven")
        elif moved < need:
            problems.append(f"the {role} nodes' EFA devices counted {_fmt(moved)} during the canary, below "
                            f"{MIN_FABRIC_SHARE:.0%} of its {_fmt(spec.kv_bytes)} of KV: the KV did not go over EFA "
                            "(check FI_PROVIDER=efa, the connector's protocol/backend setting and that the EFA "
                            "devices reach the pods)")
    return problems


def _vllm(spec: CanarySpec, evidence: dict[str, RoleEvidence]) -> tuple[float, float, list[str]]:
    decode, problems = evidence["decode"], []
    if _total(decode.after, BY_SOURCE) is None:
        problems.append(f"the decode engine exports no {BY_SOURCE}: the KV load cannot be told from a recompute "
                        "(use a vLLM build that has it, vllm#33290)")
        return 0.0, 0.0, problems
    loaded = _change(decode, BY_SOURCE, source="external_kv_transfer") or 0.0
    computed = _change(decode, BY_SOURCE, source="local_compute") or 0.0
    prompt = loaded + computed + (_change(decode, BY_SOURCE, source="local_cache_hit") or 0.0)
    if prompt <= 0:
        problems.append("the decode engine counted no prompt tokens during the canary: the request did not reach it")
    elif computed > spec.block_size:
        problems.append(f"the decode engine computed {computed:.0f} of {prompt:.0f} prompt tokens itself "
                        f"(more than one block of {spec.block_size}) and loaded {loaded:.0f} over the connector: "
                        "it recomputed the prefill instead of loading the KV (is the connector configured on "
                        "decode, and kv_load_failure_policy \"fail\"?)")
    elif loaded < prompt - spec.block_size:
        problems.append(f"the decode engine loaded only {loaded:.0f} of {prompt:.0f} prompt tokens over the connector")
    for role in ROLES:
        for name in VLLM_FAILED:
            failed = _change(evidence[role], name)
            if failed:
                problems.append(f"the {role} engine counted {failed:.0f} failed KV transfer(s) ({name}) during "
                                "the canary")
    return loaded, computed, problems


def _sglang(evidence: dict[str, RoleEvidence]) -> tuple[float, list[str]]:
    problems, transferred = [], 0.0
    for role in ROLES:
        ev, stage = evidence[role], SGLANG_STAGE[role]
        grew = _change(ev, SGLANG_STAGES, stage=stage)
        if grew is None and _total(ev.after, SGLANG_STAGES) is None:
            problems.append(f"the {role} engine exports no sglang:per_stage_req_latency_seconds: render "
                            "--enable-metrics")
        elif not grew:
            problems.append(f"the {role} engine counted no {stage} stage during the canary: no KV was transferred")
        elif role == "decode":
            transferred = grew
        for name in SGLANG_FAILED:
            failed = _change(ev, name)
            if failed:
                problems.append(f"the {role} engine counted {failed:.0f} failed request(s) ({name}) during the canary")
    return transferred, problems


def transport_in_log(connector: str, text: str) -> tuple[str, str]:
    """(the KV transport an engine's log proves: "efa", "tcp" or "" for none, a problem or "")."""
    if connector == "mooncake":
        if any(line in text for line in _MOONCAKE_TCP):
            return "tcp", f"the Mooncake Transfer Engine installed its TCP transport: {MOONCAKE_EFA_BUILD}"
        if _MOONCAKE_EFA in text:
            return "efa", ""
        return "", (f"no log line says \"{_MOONCAKE_EFA}\" (Mooncake logs it at start on an EFA build): "
                    f"{MOONCAKE_EFA_BUILD}")
    rails = {m.group(2) for m in _NIXL_RAILS.finditer(text)}
    others = sorted(rails - {"efa"})
    if others or _NIXL_TCP.search(text):
        return "tcp", (f"NIXL's libfabric chose provider {others[0] if others else 'tcp'}, not efa (TCP fallback): "
                       "set FI_PROVIDER=efa and check that the EFA devices reach the pods")
    if "efa" in rails:
        return "efa", ""
    return "", ("no log line says \"Created N rails using provider=efa\": render NIXL_LOG_LEVEL=INFO and the "
                "LIBFABRIC backend (UCX has no EFA proof)")


def judge(spec: CanarySpec, ttft_s: float, evidence: dict[str, RoleEvidence], error: str = "") -> CanaryReport:
    """The verdict on one canary from both roles' evidence (``evidence["prefill"|"decode"]``);
    ``error``: the canary request itself failed (the counters may still say why)."""
    problems: list[str] = [f"the canary request failed: {error}"] if error else []
    efa = spec.protocol == "efa"
    transports: dict[str, str] = {}
    if efa:
        problems += _fabric(spec, evidence)
        for role in ROLES:
            transports[role], problem = transport_in_log(spec.connector, evidence[role].log)
            if problem:
                problems.append(f"{role}: {problem}")
    if spec.engine == "vllm":
        loaded, computed, found = _vllm(spec, evidence)
    else:
        (loaded, found), computed = _sglang(evidence), 0.0
    problems += found
    if not error and ttft_s > spec.ttft_bound_s:
        problems.append(f"TTFT {ttft_s * 1000:.0f} ms is above the sanity bound of {spec.ttft_bound_s * 1000:.0f} ms")
    moved = {role: evidence[role].fabric_moved for role in ROLES} if efa else {}
    return CanaryReport(spec.prompt_tokens, ttft_s, spec.ttft_bound_s, spec.kv_bytes, moved, loaded, computed,
                        transports, tuple(dict.fromkeys(problems)))


def _fmt(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"
