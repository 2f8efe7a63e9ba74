"""What the engines and the GPUs say about one load point, per role, from their metrics. Pure.

The client's latencies say *that* a candidate is slower; these say *where*: waiting for a
prefill slot, moving the KV cache, speculative decoding accepting fewer drafts, GPUs idle or
saturated. Each engine's Prometheus endpoint (every pod of a role, summed) and the cluster's
DCGM exporter are read before and after each point, and sampled during it:

- counters and histograms: the difference after - before is the point's own;
- gauges (last values): the mean of the samples taken during the point.

| figure | vLLM | SGLang |
|---|---|---|
| prefill_queue_ms_mean, decode_queue_ms_mean | ``vllm:request_queue_time_seconds`` | ``sglang:queue_time_seconds`` |
| kv_transfer_ms_mean | NixlConnector: ``vllm:nixl_xfer_time_seconds`` (decode); MooncakeConnector: none | ``sglang:per_stage_req_latency_seconds{stage="prefill_transfer_kv_cache"}`` (prefill) |
| kv_transfer_mib_mean | ``vllm:nixl_bytes_transferred`` (decode; descriptor lengths) | gauge ``sglang:kv_transfer_total_mb`` (prefill, MiB of the last transfer; computed, not counted on the wire) |
| spec_acceptance | ``vllm:spec_decode_num_accepted_tokens_total`` / ``..._num_draft_tokens_total`` (decode) | gauge ``sglang:spec_accept_rate`` (decode) |
| prefill_gpu_util, decode_gpu_util | ``DCGM_FI_DEV_GPU_UTIL`` (%) of the role's GPUs | same |

``kv_transfers`` is the count of transfers during the point (the transfer-time histogram's Δ_count,
the denominator of ``kv_transfer_ms_mean``): a TTFT probe is judged only when it is at least the
point's completed requests (``tasks.planning.ttft_probe``).

Names and labels: docs/sources.md#engine-metrics and #dcgm-exporter. A figure is kept as a
(numerator, denominator) pair, so repeats pool exactly (sums over sums); one that cannot be
read says why in ``notes`` instead of showing a number.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from tasks.parsing.prometheus import Sample

PREFILL, DECODE = "prefill", "decode"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
# Figure -> unit, for people (the gate's metric names; blueprints.schema.SERVER_METRICS).
UNITS = {"prefill_queue_ms_mean": "ms", "decode_queue_ms_mean": "ms", "kv_transfer_ms_mean": "ms",
         "kv_transfer_mib_mean": "MiB", "spec_acceptance": "", "prefill_gpu_util": "%", "decode_gpu_util": "%"}
_MIB = float(1 << 20)
# Transfers counted during the point, kept as (count, 1): repeats pool to (all of them, repeats).
TRANSFERS = "kv_transfers"


@dataclass(frozen=True)
class TransferCounter:
    """Where a stack counts its KV transfers: a histogram observed once per transfer."""

    role: str
    histogram: str
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def count_name(self) -> str:
        return self.histogram + "_count" + _labels_text(self.labels)


def transfer_counter(engine: str, connector: str) -> TransferCounter | None:
    """The histogram observing every KV transfer of ``engine`` with ``connector``; None where the
    stack exports none (vLLM's MooncakeConnector)."""
    if engine == "vllm":
        return TransferCounter(DECODE, "vllm:nixl_xfer_time_seconds") if connector == "nixl" else None
    return TransferCounter(PREFILL, "sglang:per_stage_req_latency_seconds", {"stage": "prefill_transfer_kv_cache"})


@dataclass(frozen=True)
class EnginePod:
    role: str          # prefill | decode
    namespace: str
    name: str
    node: str


@dataclass(frozen=True)
class Snapshot:
    """One reading of every endpoint: the engines' samples by role (all pods of the role), and
    the DCGM exporter's by node."""

    engines: Mapping[str, tuple[Sample, ...]] = field(default_factory=dict)
    gpus: Mapping[str, tuple[Sample, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class ServerFigures:
    values: Mapping[str, tuple[float, float]] = field(default_factory=dict)   # figure -> (num, den)
    notes: tuple[str, ...] = ()

    def value(self, name: str) -> float | None:
        pair = self.values.get(name)
        return pair[0] / pair[1] if pair and pair[1] else None


def pool(parts: Iterable[ServerFigures]) -> ServerFigures:
    """Several repeats of a point as one: numerators and denominators summed, notes kept once."""
    values: dict[str, tuple[float, float]] = {}
    notes: dict[str, None] = {}
    for part in parts:
        for name, (num, den) in part.values.items():
            old = values.get(name, (0.0, 0.0))
            values[name] = (old[0] + num, old[1] + den)
        notes.update(dict.fromkeys(part.notes))
    return ServerFigures(values, tuple(notes))


# --- reading samples ------------------------------------------------------------------------------


def _total(samples: Sequence[Sample], name: str, **labels: str) -> float | None:
    """The sum of every sample named ``name`` whose labels include ``labels``; None if there is none."""
    hits = [s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
    return sum(hits) if hits else None


def _delta(before: Sequence[Sample], after: Sequence[Sample], name: str, **labels: str) -> float | None:
    a = _total(after, name, **labels)
    if a is None:
        return None
    return a - (_total(before, name, **labels) or 0.0)


class _Reading:
    """The figures of one point as they are found, and why the others are not."""

    def __init__(self, before: Snapshot, during: Sequence[Snapshot], after: Snapshot):
        self.before, self.after = before, after
        self.during = list(during) or [after]   # a point shorter than the sampling interval
        self.values: dict[str, tuple[float, float]] = {}
        self.notes: list[str] = []

    def _ratio(self, figure: str, num: float | None, den: float | None, missing: str, went_back: str,
               nothing: str) -> None:
        """Keep num/den as the figure, or say why not: absent, a counter reset, nothing counted."""
        if num is None or den is None:
            self.notes.append(f"{figure}: {missing}")
        elif num < 0 or den < 0:
            self.notes.append(f"{figure}: {went_back} went backwards (an engine restarted during the point)")
        elif den == 0:
            self.notes.append(f"{figure}: {nothing}")
        else:
            self.values[figure] = (num, den)

    def histogram_mean(self, figure: str, role: str, name: str, scale: float, **labels: str) -> None:
        """Mean of what a histogram observed during the point: Δ_sum / Δ_count."""
        b, a = self.before.engines.get(role, ()), self.after.engines.get(role, ())
        total, count = _delta(b, a, name + "_sum", **labels), _delta(b, a, name + "_count", **labels)
        where = f"{name}{_labels_text(labels)} on the {role} engines"
        self._ratio(figure, None if total is None else total * scale, count, f"no {where}", where,
                    f"{where} observed nothing during the point")

    def transfers(self, counter: TransferCounter) -> None:
        """How many transfers the histogram observed during the point (0 is a reading: none happened)."""
        b, a = self.before.engines.get(counter.role, ()), self.after.engines.get(counter.role, ())
        count = _delta(b, a, counter.histogram + "_count", **counter.labels)
        where = f"{counter.count_name} on the {counter.role} engines"
        if count is None:
            self.notes.append(f"{TRANSFERS}: no {where}")
        elif count < 0:
            self.notes.append(f"{TRANSFERS}: {where} went backwards (an engine restarted during the point)")
        else:
            self.values[TRANSFERS] = (count, 1.0)

    def counter_ratio(self, figure: str, role: str, numerator: str, denominator: str, absent: str) -> None:
        b, a = self.before.engines.get(role, ()), self.after.engines.get(role, ())
        self._ratio(figure, _delta(b, a, numerator), _delta(b, a, denominator), absent,
                    f"{denominator} on the {role} engines", absent)

    def gauge_mean(self, figure: str, role: str, name: str, absent: str) -> None:
        """Mean of a last-value gauge over the samples. SGLang exports its transfer and acceptance
        gauges from the start, as 0 until something happened: a 0 is no reading, not a value."""
        values = [s.value for snap in self.during for s in snap.engines.get(role, ())
                  if s.name == name and s.value > 0]
        if not values:
            self.notes.append(f"{figure}: {absent}")
        else:
            self.values[figure] = (sum(values), float(len(values)))

    def gpu_util(self, pods: Sequence[EnginePod]) -> None:
        for role in (PREFILL, DECODE):
            figure = f"{role}_gpu_util"
            mine = [p for p in pods if p.role == role]
            util = [v for snap in self.during for v in _role_gpu_util(snap.gpus, mine)]
            if util:
                self.values[figure] = (sum(util), float(len(util)))
            else:
                nodes = ", ".join(sorted({p.node for p in mine})) or "no pods"
                self.notes.append(f"{figure}: no {GPU_UTIL} from a DCGM exporter on the {role} nodes ({nodes})")


def _labels_text(labels: Mapping[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else ""


def _role_gpu_util(by_node: Mapping[str, tuple[Sample, ...]], pods: Sequence[EnginePod]) -> list[float]:
    """The role's GPUs' utilisation in one reading. With the exporter's pod mapping on (labels
    ``namespace``/``pod``), exactly the GPUs given to the role's pods; without it, every GPU of
    the role's nodes (a whole node per engine pod is how these stacks are laid out)."""
    names = {(p.namespace, p.name) for p in pods}
    out = []
    for node in {p.node for p in pods}:
        lines = [s for s in by_node.get(node, ()) if s.name == GPU_UTIL]
        mapped = any("pod" in s.labels for s in lines)
        out += [s.value for s in lines
                if not mapped or (s.labels.get("namespace"), s.labels.get("pod")) in names]
    return out


# --- the figures ----------------------------------------------------------------------------------


def figures(engine: str, connector: str, pods: Sequence[EnginePod], before: Snapshot, during: Sequence[Snapshot],
            after: Snapshot) -> ServerFigures:
    """The point's server-side figures for ``engine`` (vllm | sglang) with KV ``connector``
    (nixl | mooncake): see the table in the module docstring."""
    r = _Reading(before, during, after)
    prefix = "vllm:" if engine == "vllm" else "sglang:"
    queue = "vllm:request_queue_time_seconds" if engine == "vllm" else "sglang:queue_time_seconds"
    r.histogram_mean("prefill_queue_ms_mean", PREFILL, queue, 1000.0)
    r.histogram_mean("decode_queue_ms_mean", DECODE, queue, 1000.0)
    if engine == "vllm" and connector == "nixl":
        r.histogram_mean("kv_transfer_ms_mean", DECODE, "vllm:nixl_xfer_time_seconds", 1000.0)
        r.histogram_mean("kv_transfer_mib_mean", DECODE, "vllm:nixl_bytes_transferred", 1.0 / _MIB)
    elif engine == "vllm":
        r.notes.append("kv_transfer_ms_mean, kv_transfer_mib_mean: vLLM's MooncakeConnector exports no transfer "
                       "metrics (its start-up log names the transport; see the deploy canary)")
    else:
        r.histogram_mean("kv_transfer_ms_mean", PREFILL, "sglang:per_stage_req_latency_seconds", 1000.0,
                         stage="prefill_transfer_kv_cache")
        r.gauge_mean("kv_transfer_mib_mean", PREFILL, "sglang:kv_transfer_total_mb",
                     "no sglang:kv_transfer_total_mb reading on the prefill engines (--enable-metrics?)")
    if (counter := transfer_counter(engine, connector)) is not None:
        r.transfers(counter)
    if engine == "vllm":
        r.counter_ratio("spec_acceptance", DECODE, "vllm:spec_decode_num_accepted_tokens_total",
                        "vllm:spec_decode_num_draft_tokens_total",
                        "no drafted tokens on the decode engines (speculative decoding is off)")
    else:
        r.gauge_mean("spec_acceptance", DECODE, prefix + "spec_accept_rate",
                     "no sglang:spec_accept_rate reading on the decode engines (speculative decoding is off)")
    r.gpu_util(pods)
    return ServerFigures(dict(r.values), tuple(r.notes))
