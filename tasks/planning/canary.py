"""Prove the KV data path: one long-prompt request through the candidate's router, judged by metrics.

A wrong transfer setting silently falls back to TCP and TTFT regresses (docs/sources.md#efa-tcp-fallback), so
the config is not evidence. Evidence is what the engines count while the canary runs:

- the prefill leader's KV bytes *sent* and the decode leader's KV bytes *received* both moved,
  over the protocol the blueprint asks for (``protocol="efa"``), and none moved over another;
- the decode engine recomputed no prefill (a failed pull that falls back to recomputing still
  answers the request, only slower);
- the time to first token stays under a sanity bound.

The counters are read by suffix, ``*kv_transfer_bytes_total{direction, protocol}`` and
``*kv_recomputed_prefills_total``, from the KV-transfer exporter on each engine's metrics port.

A stock vLLM image with a NIXL connector has no such exporter, but counts for itself on the
side that reads the KV (decode): ``vllm:nixl_bytes_transferred`` (a histogram; its ``_sum``),
``vllm:nixl_num_failed_transfers_total``, and the external prefix cache queries and hits (prompt
tokens looked up in, and loaded from, the prefill). Those metrics cannot name the transport, so
the engines' start-up logs do (docs/sources.md#kv-transport-log: "Backend LIBFABRIC was instantiated" or "EFA device
(libfabric)" for EFA; NIXL's UCX backend has no EFA transport). An engine with neither kind of
evidence fails the canary: without a count there is no proof.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass

from tasks.parsing.prometheus import Sample

KV_BYTES_SUFFIX = "kv_transfer_bytes_total"
RECOMPUTED_SUFFIX = "kv_recomputed_prefills_total"
NIXL_BYTES = "vllm:nixl_bytes_transferred_sum"
NIXL_FAILED = "vllm:nixl_num_failed_transfers_total"
PREFIX_QUERIES = "external_prefix_cache_queries_total"
PREFIX_HITS = "external_prefix_cache_hits_total"
# "provider efa", "provider: tcp", "selected provider is tcp;ofi_rxm", "provider=sockets"
_PROVIDER_NAMED = re.compile(r"provider(?: is)?[:=]?\s+([a-z0-9_]+(?:;[a-z0-9_]+)?)")
# Below this share of the prompt loaded from the prefill, the decode engine recomputed the rest.
MIN_LOADED_SHARE = 0.9
DEFAULT_TOKENS = 16384
# Common one-token English words: the prompt's length in tokens is close to its word count
# under any BPE tokenizer, and no two canaries share a prefix (a nonce comes first).
_WORDS = ("the model reads a long prompt and the cache moves from prefill to decode over the fabric "
          "while each node keeps its own copy of the weights on local disk").split()


@dataclass(frozen=True)
class CanaryReport:
    prompt_tokens: int
    ttft_s: float
    ttft_bound_s: float
    prefill_sent: dict[str, float]  # protocol -> bytes moved during the canary
    decode_received: dict[str, float]
    recomputed: float
    problems: tuple[str, ...]
    evidence: str = "exporter"      # or "vllm-nixl": vLLM's own NIXL metrics, on the side that drives it

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        moved = ", ".join(f"prefill sent {_fmt(v)} over {k}" for k, v in sorted(self.prefill_sent.items()) if v)
        got = ", ".join(f"decode received {_fmt(v)} over {k}" for k, v in sorted(self.decode_received.items()) if v)
        if self.evidence == "vllm-nixl":
            moved = "counted by vLLM's NIXL metrics"
        redone = "prompt tokens" if self.evidence == "vllm-nixl" else "prefills"
        head = (f"canary ({self.prompt_tokens} prompt tokens): TTFT {self.ttft_s * 1000:.0f} ms "
                f"(bound {self.ttft_bound_s * 1000:.0f} ms); {moved or 'no KV sent'}; {got or 'no KV received'}; "
                f"{self.recomputed:.0f} {redone} recomputed")
        return head if self.ok else head + "\n  " + "\n  ".join(self.problems)


def canary_prompt(tokens: int) -> str:
    words = [f"canary-{secrets.token_hex(4)}"]
    words += [_WORDS[i % len(_WORDS)] for i in range(max(tokens - 1, 0))]
    return " ".join(words)


def canary_tokens(max_context: int, wanted: int | None = None) -> int:
    """Long enough that its KV is megabytes, short enough to fit the context with room to answer."""
    return max(256, min(wanted or DEFAULT_TOKENS, max_context // 2))


def kv_bytes(samples: Iterable[Sample], direction: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for s in samples:
        if s.name.endswith(KV_BYTES_SUFFIX) and s.labels.get("direction") == direction:
            protocol = s.labels.get("protocol", "unknown")
            out[protocol] = out.get(protocol, 0.0) + s.value
    return out


def recomputed(samples: Iterable[Sample]) -> float:
    return sum(s.value for s in samples if s.name.endswith(RECOMPUTED_SUFFIX))


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after.get(k, 0.0) - before.get(k, 0.0) for k in sorted(set(before) | set(after))}


def transport_in_log(text: str) -> str | None:
    """The KV transport an engine's start-up log names: ``efa``, another provider's name (``tcp``,
    ``sockets``, ...), or None when it names none. A provider named other than efa wins: the
    manifests set FI_PROVIDER=efa, so libfabric naming anything else means it fell back."""
    lowered = text.lower()
    named = {m.group(1).split(";")[0] for m in _PROVIDER_NAMED.finditer(lowered)}
    others = sorted(named - {"efa"})
    if others:
        return others[0]
    if named or "efa device (libfabric)" in lowered or "backend libfabric was instantiated" in lowered:
        return "efa"
    if "backend ucx was instantiated" in lowered:
        return "tcp"  # UCX has no EFA transport
    return None


def exporter_present(samples_by_role: dict[str, list[Sample]]) -> bool:
    """Whether any engine exports the KV-transfer exporter's byte counter."""
    return any(s.name.endswith(KV_BYTES_SUFFIX) for samples in samples_by_role.values() for s in samples)


def _total(samples: Iterable[Sample], name: str) -> float | None:
    values = [s.value for s in samples if s.name == name]
    return sum(values) if values else None


def _suffix_total(samples: Iterable[Sample], suffix: str) -> float:
    return sum(s.value for s in samples if s.name.endswith(suffix))


def _judge_native_nixl(expected_protocol: str, before: dict[str, list[Sample]], after: dict[str, list[Sample]],
                       transport: str | None) -> tuple[dict[str, float], float, list[str]]:
    """(received by transport, prompt tokens recomputed, problems) from vLLM's own NIXL metrics.
    The side that drives the transfer counts it (decode for pull, prefill for push): both are summed."""
    problems = []

    def change(name: str) -> float:
        return sum((_total(after[r], name) or 0.0) - (_total(before[r], name) or 0.0) for r in after)

    moved, failed = change(NIXL_BYTES), change(NIXL_FAILED)
    if failed > 0:
        problems.append(f"the engines counted {failed:.0f} failed NIXL transfer(s) during the canary")
    if moved <= 0:
        problems.append("no KV bytes moved during the canary (vllm:nixl_bytes_transferred)")
    if transport is None:
        problems.append("no engine log names the KV transport (\"Backend LIBFABRIC was instantiated\" or \"EFA "
                        "device (libfabric)\"): the bytes moved, but not provably over " + expected_protocol)
    elif transport != expected_protocol and moved > 0:
        problems.append(f"the engines moved {_fmt(moved)} of KV over {transport}, none over {expected_protocol}")
        problems.append(f"the KV transfer fell back from {expected_protocol}: check FI_PROVIDER=efa, the "
                        "connector's protocol/backend setting and that the EFA devices reach the pods")
    decode_before, decode_after = before["decode"], after["decode"]
    queried = _suffix_total(decode_after, PREFIX_QUERIES) - _suffix_total(decode_before, PREFIX_QUERIES)
    loaded = _suffix_total(decode_after, PREFIX_HITS) - _suffix_total(decode_before, PREFIX_HITS)
    redone = max(queried - loaded, 0.0) if queried > 0 and loaded < MIN_LOADED_SHARE * queried else 0.0
    if redone:
        problems.append(f"the decode engine loaded {loaded:.0f} of {queried:.0f} prompt tokens from the prefill "
                        f"and recomputed the rest")
    return ({transport or "unknown": moved} if moved > 0 else {}), redone, problems


def judge(prompt_tokens: int, ttft_s: float, ttft_bound_s: float, expected_protocol: str,
          before: dict[str, list[Sample]], after: dict[str, list[Sample]],
          transports: dict[str, str | None] | None = None) -> CanaryReport:
    """``before``/``after``: the metrics samples of the ``prefill`` and ``decode`` leaders (pooled
    per role), scraped just before and just after the canary; ``transports``: what each role's
    start-up log names (``transport_in_log``), used with vLLM's own NIXL metrics. Pure."""
    if not exporter_present(after) and any(_total(after[role], NIXL_BYTES) is not None for role in after):
        named = [t for t in (transports or {}).values() if t]
        # one engine on another transport is enough to say the path fell back
        transport = next((t for t in named if t != expected_protocol), named[0] if named else None)
        received, redone, problems = _judge_native_nixl(expected_protocol, before, after, transport)
        if ttft_s > ttft_bound_s:
            problems.append(f"TTFT {ttft_s * 1000:.0f} ms is above the sanity bound of {ttft_bound_s * 1000:.0f} ms")
        return CanaryReport(prompt_tokens, ttft_s, ttft_bound_s, {}, received, redone, tuple(problems), "vllm-nixl")
    problems: list[str] = []
    moved = {}
    fell_back = False
    for role, direction in (("prefill", "sent"), ("decode", "received")):
        if not any(s.name.endswith(KV_BYTES_SUFFIX) for s in after[role]):
            problems.append(f"the {role} engine exports no *{KV_BYTES_SUFFIX} counter: the KV path cannot be "
                            "proven; enable the transfer engine's metrics in the image")
            moved[role] = {}
            continue
        moved[role] = delta(kv_bytes(before[role], direction), kv_bytes(after[role], direction))
        wanted = moved[role].get(expected_protocol, 0.0)
        others = {p: v for p, v in moved[role].items() if p != expected_protocol and v > 0}
        if others:
            fell_back = True
            over = " and ".join(f"{_fmt(v)} over {p}" for p, v in others.items())
            problems.append(f"the {role} engine {direction} {over}"
                            + (f" (and {_fmt(wanted)} over {expected_protocol})" if wanted > 0
                               else f", none over {expected_protocol}"))
        elif wanted <= 0:
            problems.append(f"the {role} engine {direction} no KV bytes during the canary")
    if fell_back:
        problems.append(f"the KV transfer fell back from {expected_protocol}: check FI_PROVIDER=efa, the "
                        "connector's protocol/backend setting and that the EFA devices reach the pods")
    redone = recomputed(after["decode"]) - recomputed(before["decode"])
    if redone > 0:
        problems.append(f"the decode engine recomputed {redone:.0f} prefill(s) instead of loading the KV")
    if ttft_s > ttft_bound_s:
        problems.append(f"TTFT {ttft_s * 1000:.0f} ms is above the sanity bound of {ttft_bound_s * 1000:.0f} ms")
    return CanaryReport(prompt_tokens, ttft_s, ttft_bound_s, moved["prefill"], moved["decode"], redone,
                        tuple(problems))


def _fmt(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"
