"""The sandbox engines' latency model: deterministic, so tests can predict what they measure.

All times are seconds; ``n`` is the request's input length in tokens (see ``tokenizer``).

    prefill(n)   = prefill_scale * (prefill_base_s + prefill_per_token_s * n)
    kv_bytes(n)  = kv_bytes_per_token * n        (default: the GLM-5.1 MLA cache shape,
                   78 layers x (512 latent + 64 rope + 128 indexer) elements, 1 byte each at
                   --kv-cache-dtype fp8, 2 bytes otherwise: 54,912 or 109,824 bytes per token)
    transfer(n)  = kv_bytes(n) / (kv_link_gbytes_per_s * 1e9)        when the KV protocol is efa
                 = transfer_efa(n) * tcp_slowdown                     when it resolved to tcp
    TTFT         = queue + prefill(n)                    a plain engine (no PD)
                 = queue + prefill(n) + transfer(n)      through a PD router: the prefill engine
                   computes the KV and the first token, the decode engine pulls the KV and
                   does not recompute it
    step(r, n)   = tpot_scale * (tpot_base_s * (1 + tpot_alpha * (r - 1)) + tpot_per_ctx_token_s * n)
                   where r = requests running on the engine that generates (admitted, prefilling
                   or decoding) at the moment the step is scheduled
    token k>=2   is emitted step(r, n) after token k-1; at a steady concurrency C, TPOT = step(C, n)

``queue`` is the wait for a slot: at most ``--max-num-seqs`` (vLLM) / ``--max-running-requests``
(SGLang) requests run at once (default 256), and, when ``prefill_slots`` > 0, at most that many
prefills run at once (FIFO). ``prefill_slots`` = 0 (the default) means prefill capacity is never
the bottleneck, so TTFT does not depend on concurrency below the sequence limit.

Defaults (realistic shape, sandbox-fast): 3K input -> TTFT 100.6 ms through PD (60 + 39 + 1.6),
60K -> 873 ms; TPOT 10.2 ms at concurrency 1 and 3K, 12.2 ms at 8, 13.9 ms at 60K and 4.
The engines keep to these times with absolute deadlines (sleep until due, not for a duration),
so processing overhead does not accumulate.

Configure per deployment with the ``PDLIFT_SANDBOX_LATENCY`` env var (JSON object of the fields
below) or rules in ``$PDLIFT_STATE_DIR/sandbox/engines.json`` (see ``settings``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

# GLM-5.1 MLA cache layout (model-facts): elements per token per layer, and layers.
GLM_LAYERS = 78
GLM_ELEMENTS_PER_LAYER = 512 + 64 + 128


def kv_element_bytes(kv_cache_dtype: str) -> int:
    """Bytes per cached element: fp8 variants are one byte, auto/bf16/fp16 two."""
    return 1 if kv_cache_dtype.lower().startswith("fp8") else 2


@dataclass(frozen=True)
class LatencyModel:
    prefill_base_s: float = 0.060
    prefill_per_token_s: float = 1.3e-5
    prefill_scale: float = 1.0
    kv_bytes_per_token: int = 0  # 0: derived from the GLM shape and --kv-cache-dtype
    kv_link_gbytes_per_s: float = 100.0  # effective EFA rate (reference: 8.8 GB in ~100 ms)
    tcp_slowdown: float = 100.0
    tpot_base_s: float = 0.010
    tpot_alpha: float = 0.0286
    tpot_per_ctx_token_s: float = 5.0e-8
    tpot_scale: float = 1.0
    # With speculative decoding on (--speculative-config / --speculative-num-draft-tokens): the
    # share of drafted tokens the target model accepts (MTP on GLM-class models: 0.6-0.9).
    spec_acceptance: float = 0.7
    prefill_slots: int = 0

    @classmethod
    def from_dict(cls, data: dict) -> "LatencyModel":
        """Build from a JSON object; unknown keys are an error so a typo is not silently ignored."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown latency setting(s) {unknown}; known: {sorted(known)}")
        return cls(**data)

    def merged(self, overrides: dict) -> "LatencyModel":
        return LatencyModel.from_dict({**dataclasses.asdict(self), **overrides})

    def prefill_s(self, n: int) -> float:
        return self.prefill_scale * (self.prefill_base_s + self.prefill_per_token_s * n)

    def kv_bytes(self, n: int, kv_cache_dtype: str = "fp8") -> int:
        per_token = self.kv_bytes_per_token or (
            GLM_LAYERS * GLM_ELEMENTS_PER_LAYER * kv_element_bytes(kv_cache_dtype)
        )
        return per_token * n

    def transfer_s(self, nbytes: int, protocol: str) -> float:
        seconds = nbytes / (self.kv_link_gbytes_per_s * 1e9)
        return seconds * self.tcp_slowdown if protocol == "tcp" else seconds

    def step_s(self, running: int, n: int) -> float:
        batch = max(1, running)
        return self.tpot_scale * (
            self.tpot_base_s * (1.0 + self.tpot_alpha * (batch - 1)) + self.tpot_per_ctx_token_s * n
        )

    def ttft_s(self, n: int, *, pd: bool, protocol: str = "efa", kv_cache_dtype: str = "fp8") -> float:
        """TTFT without queueing, as a client of the router (pd) or of a plain engine measures it."""
        transfer = self.transfer_s(self.kv_bytes(n, kv_cache_dtype), protocol) if pd else 0.0
        return self.prefill_s(n) + transfer
