"""Benchmark metrics from per-request records: pure, and equal to vLLM bench serve's where they overlap.

Definitions (``vllm/benchmarks/serve.py`` ``calculate_metrics``; docs/sources.md#bench-metrics).
All timestamps are ``time.perf_counter()`` seconds taken by the load generator.

- A request *completed* when it has no error and at least one content chunk arrived
  (``first_token_ts`` is set). Every other request *failed*.
- TTFT = first content token - send.
- E2E  = last content chunk - send (the stream's tail, e.g. the usage chunk, is not a token).
- TPOT (per request) = (E2E - TTFT) / (completion_tokens - 1): the first token is excluded, and
  TPOT is undefined (left out of the statistics) for outputs of one token. ``completion_tokens``
  is the server's ``usage`` figure, never a client re-tokenisation.
- ITL  = every gap between consecutive content chunks of a request, all requests pooled. A chunk
  may carry several tokens (speculative decoding, stream intervals), so gate on TPOT, not ITL.
- Queue wait = time the request waited for a client slot before it was sent (reported, not part
  of the latencies above, as vLLM's ``client_queue_time``).
- Request throughput = completed requests / run duration; output token throughput =
  sum(completion_tokens of completed requests) / duration; total token throughput adds prompts.
- Goodput = completed requests meeting *every* SLO that is set (TTFT, TPOT, E2E; a value equal
  to the SLO meets it) / duration. As in vLLM, a one-token output meets the TPOT SLO. With no
  SLO set, goodput equals request throughput.
- Error rate = failed / all requests (0 when there were none).
- Samples are kept in send order, with each request's ITL gap count and the point's concurrency,
  so the gate can resample requests that were in flight together as one block.
- Statistics: mean, p50, p90, p99 (linear interpolation between closest ranks, numpy's default)
  and the population standard deviation (numpy's ``std``), in milliseconds.

Several repeats of one point are pooled: samples are concatenated and throughputs divide by the
summed duration. Each repeat is also summarised on its own (``ScenarioSummary.repeats``) so the
gate can see how far repeats drift apart.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from blueprints.schema import SERVER_METRICS, SloSpec


@dataclass(frozen=True)
class RequestRecord:
    """One request as the load generator saw it (``time.perf_counter()`` seconds)."""

    scenario: str
    concurrency: int
    repeat: int
    send_ts: float
    first_token_ts: float | None
    chunk_ts: tuple[float, ...]        # arrival of every content chunk, the first included
    end_ts: float                      # the response (or the error) finished
    prompt_tokens: int
    completion_tokens: int             # server usage.completion_tokens
    error: str | None = None
    queue_wait_s: float = 0.0

    @property
    def completed(self) -> bool:
        return self.error is None and self.first_token_ts is not None

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_ts is None else self.first_token_ts - self.send_ts

    @property
    def e2e_s(self) -> float | None:
        if self.first_token_ts is None:
            return None
        last = self.chunk_ts[-1] if self.chunk_ts else self.first_token_ts
        return last - self.send_ts

    @property
    def tpot_s(self) -> float | None:
        ttft, e2e = self.ttft_s, self.e2e_s
        if ttft is None or e2e is None or self.completion_tokens <= 1:
            return None
        return (e2e - ttft) / (self.completion_tokens - 1)

    @property
    def itl_s(self) -> tuple[float, ...]:
        return tuple(b - a for a, b in zip(self.chunk_ts, self.chunk_ts[1:]))


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation, as ``numpy.percentile``'s default."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} is outside 0..100")
    return percentile_sorted(sorted(values), q)


def percentile_sorted(xs: Sequence[float], q: float) -> float:
    """``percentile`` of values already sorted ascending (the bootstrap calls this in a loop)."""
    h = (len(xs) - 1) * q / 100.0
    lo = math.floor(h)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (h - lo) * (xs[hi] - xs[lo])


@dataclass(frozen=True)
class Distribution:
    """Statistics of one latency family, in milliseconds; all None when there are no values."""

    count: int = 0
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    std: float | None = None

    @classmethod
    def of(cls, values_ms: Sequence[float]) -> "Distribution":
        if not values_ms:
            return cls()
        n = len(values_ms)
        mean = math.fsum(values_ms) / n
        std = math.sqrt(math.fsum((v - mean) ** 2 for v in values_ms) / n)
        xs = sorted(values_ms)
        return cls(n, mean, percentile_sorted(xs, 50), percentile_sorted(xs, 90), percentile_sorted(xs, 99), std)


@dataclass(frozen=True)
class Samples:
    """Per-request values in milliseconds, kept for the gate's statistical comparison."""

    ttft: tuple[float, ...] = ()
    tpot: tuple[float, ...] = ()
    itl: tuple[float, ...] = ()
    e2e: tuple[float, ...] = ()
    # How the values are grouped for the gate's bootstrap: ITL gaps per request (in order), and
    # requests per time block (the point's concurrency: requests in flight together share batches).
    itl_counts: tuple[int, ...] = ()
    block: int = 1

    def of(self, family: str) -> tuple[float, ...]:
        return getattr(self, family)

    def counts_of(self, family: str) -> tuple[int, ...]:
        """Values per request of ``family`` (empty: one value each)."""
        return self.itl_counts if family == "itl" else ()


@dataclass(frozen=True)
class ScenarioSummary:
    """Everything measured at one (scenario, concurrency) point, repeats pooled."""

    scenario: str
    concurrency: int
    requests: int
    completed: int
    failed: int
    duration_s: float
    ttft: Distribution
    tpot: Distribution
    itl: Distribution
    e2e: Distribution
    queue_wait: Distribution
    request_throughput: float
    output_tokens_per_s: float
    total_tokens_per_s: float
    goodput: float
    error_rate: float
    prompt_tokens_mean: float | None = None
    client_saturated: bool = False
    samples: Samples | None = None
    repeats: tuple["ScenarioSummary", ...] = field(default=())
    # What the engines and GPUs said (tasks.planning.server_figures): figure -> (numerator,
    # denominator), and why a figure is missing.
    server: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    server_notes: tuple[str, ...] = ()


# The gate's metric names (blueprints.schema.Metric) and where each lives in a summary.
LATENCY_FAMILIES = ("ttft", "tpot", "itl", "e2e")
LATENCY_STATS = ("mean", "p50", "p90", "p99")
RUN_LEVEL_METRICS = ("output_tokens_per_s", "request_throughput", "goodput", "error_rate")


def split_metric(metric: str) -> tuple[str, str] | None:
    """``"tpot_p99"`` -> ``("tpot", "p99")``; None for run-level metrics."""
    family, _, stat = metric.partition("_")
    if family in LATENCY_FAMILIES and stat in LATENCY_STATS:
        return family, stat
    return None


def metric_value(summary: ScenarioSummary, metric: str) -> float | None:
    """The figure a gate metric names (milliseconds for latencies); None when undefined."""
    parts = split_metric(metric)
    if parts is not None:
        return getattr(getattr(summary, parts[0]), parts[1])
    if metric in RUN_LEVEL_METRICS:
        return getattr(summary, metric)
    if metric in SERVER_METRICS:
        num, den = summary.server.get(metric, (0.0, 0.0))
        return num / den if den else None
    raise ValueError(f"unknown metric {metric!r}")


def _meets_slo(record: RequestRecord, slo: SloSpec) -> bool:
    checks = ((slo.ttft_ms, record.ttft_s), (slo.e2e_ms, record.e2e_s), (slo.tpot_ms, record.tpot_s or 0.0))
    return all(limit is None or value * 1000.0 <= limit for limit, value in checks)


def _one_point(records: Sequence[RequestRecord]) -> tuple[str, int]:
    points = {(r.scenario, r.concurrency) for r in records}
    if len(points) != 1:
        raise ValueError(f"records must come from one (scenario, concurrency) point, got {sorted(points)}")
    return points.pop()


def _summarise_once(scenario: str, concurrency: int, records: Sequence[RequestRecord], duration_s: float,
                    slo: SloSpec, client_saturated: bool, keep_samples: bool) -> ScenarioSummary:
    if duration_s <= 0:
        raise ValueError(f"duration must be positive, got {duration_s}")
    # In send order: consecutive requests are the ones that were in flight together.
    done = sorted((r for r in records if r.completed), key=lambda r: (r.repeat, r.send_ts))
    ttft = tuple(r.ttft_s * 1000.0 for r in done)
    tpot = tuple(r.tpot_s * 1000.0 for r in done if r.tpot_s is not None)
    e2e = tuple(r.e2e_s * 1000.0 for r in done)
    itl = tuple(gap * 1000.0 for r in done for gap in r.itl_s)
    out_tokens = sum(r.completion_tokens for r in done)
    in_tokens = sum(r.prompt_tokens for r in done)
    return ScenarioSummary(
        scenario=scenario, concurrency=concurrency,
        requests=len(records), completed=len(done), failed=len(records) - len(done),
        duration_s=duration_s,
        ttft=Distribution.of(ttft), tpot=Distribution.of(tpot), itl=Distribution.of(itl),
        e2e=Distribution.of(e2e), queue_wait=Distribution.of([r.queue_wait_s * 1000.0 for r in done]),
        request_throughput=len(done) / duration_s,
        output_tokens_per_s=out_tokens / duration_s,
        total_tokens_per_s=(out_tokens + in_tokens) / duration_s,
        goodput=sum(1 for r in done if _meets_slo(r, slo)) / duration_s,
        error_rate=(len(records) - len(done)) / len(records) if records else 0.0,
        prompt_tokens_mean=in_tokens / len(done) if done else None,
        client_saturated=client_saturated,
        samples=Samples(ttft, tpot, itl, e2e, tuple(len(r.itl_s) for r in done), max(1, concurrency))
        if keep_samples else None,
    )


def summarize(records: Iterable[RequestRecord], duration_s: float | Mapping[int, float], slo: SloSpec,
              client_saturated: bool = False, *, scenario: str | None = None,
              concurrency: int | None = None, keep_samples: bool = True) -> ScenarioSummary:
    """Summarise the measured (post-warm-up) records of one (scenario, concurrency) point.

    ``duration_s`` is the run's duration, or one duration per repeat index when the records span
    several repeats (then each repeat is also summarised in ``repeats``). ``scenario`` and
    ``concurrency`` are needed only when there are no records at all.
    """
    records = list(records)
    if records:
        scenario, concurrency = _one_point(records)
    elif scenario is None or concurrency is None:
        raise ValueError("no records: pass scenario and concurrency")
    by_repeat: dict[int, list[RequestRecord]] = {}
    for r in records:
        by_repeat.setdefault(r.repeat, []).append(r)
    if not isinstance(duration_s, Mapping):
        if len(by_repeat) > 1:
            raise ValueError(f"records span repeats {sorted(by_repeat)}: give a duration per repeat")
        return _summarise_once(scenario, concurrency, records, float(duration_s), slo,
                               client_saturated, keep_samples)
    missing = set(by_repeat) - set(duration_s)
    if missing:
        raise ValueError(f"no duration for repeats {sorted(missing)}")
    pooled = _summarise_once(scenario, concurrency, records, math.fsum(duration_s.values()), slo,
                             client_saturated, keep_samples)
    if len(duration_s) < 2:
        return pooled
    repeats = tuple(
        _summarise_once(scenario, concurrency, by_repeat.get(k, []), duration_s[k], slo,
                        client_saturated, keep_samples=False)
        for k in sorted(duration_s)
    )
    return replace(pooled, repeats=repeats)
