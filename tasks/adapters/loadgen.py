"""The load generator: OpenAI streaming requests against one endpoint, one ``RequestRecord`` each.

    result = run_load(LoadSpec(base_url="http://10.0.0.5:8000", scenario="isl-3k", input_tokens=3000,
                               output_tokens=512, concurrency=16, duration_s=300, max_requests=2000))

Asyncio with aiohttp inside this adapter only; callers are synchronous. Each load point runs in
a process of its own (``loadgen_run``): inside a Prefect task run the orchestrator's threads
held the event loop back by 5 ms on average and 42 ms at p99 (measured here, against 0.6 and 7
ms in a plain process), which would have been read as server latency. A child process has its
own interpreter lock, and its CPU time is the client's alone.

How it keeps the measurement honest (docs/sources.md#honest-load-client):

- Concurrency mode keeps exactly C requests in flight (C workers, each sending its next request
  when the last one ends). With fixed output lengths, workers that start together stay in
  step: C requests arrive at once, every time, and the server's own work on such a burst read
  as TTFT (2-3% at C=256, measured here). So the workers' first requests are spread over one
  request's latency (``stagger``, measured in the warm-up); what they send during that ramp is
  warm-up too, and the measured window starts after it. After the window the workers keep the
  concurrency up until the last measured request ends (the tail of a run is not lighter).
- Poisson mode sends at exponential inter-arrival times of ``rate`` requests/s (seeded), at
  most C in flight, and records each request's wait for a slot (``queue_wait_s``: coordinated
  omission made visible; it also holds the client's own delay between a request being due
  and its bytes leaving, see ``loadgen_http``). Without a ``rate`` it is taken from the
  warm-up by Little's law: rate = C / mean warm-up latency, i.e. about C in flight.
- Bounds: no measured request is sent after ``duration_s`` or after ``max_requests``; the
  cool-down requests that keep the concurrency up meanwhile are cancelled when the last
  measured one ends; every request has a total timeout, and the child process a time limit.
- Warm-up requests are sent first, at concurrency C, and left out of the records: at least
  ``warmup_requests`` and at least one per connection (C), so connection set-up and the
  server's first burst do not reach the statistics (measured here: the first wave of 64 new
  connections read 5% slower than every later one). ``warmup_requests=0`` skips the warm-up.
- Prompts: exact input length and unique per request (``loadgen_prompts``); fixed output
  length (``max_tokens`` with ``ignore_eos``).
- One ``ClientSession`` with ``TCPConnector(limit=C)``; ``read_bufsize`` of 4 MiB instead of
  aiohttp's 64 KiB, the vLLM client's collapse at long context (vllm#39963); ``trust_env`` off
  so no proxy from the environment sits between client and server; the GC heap is frozen for
  the measured phase (as vLLM bench serve does) so collections do not stall the event loop.
- The client watches itself: CPU time (``time.process_time``) over wall time, and event-loop
  lag (how late a 10 ms ticker wakes: every timestamp is late by the lag of its moment, so the
  mean lag is the bias of a mean latency, the p99 lag the distortion of its tail). Above
  ``CPU_SATURATED`` of one core, a mean lag above ``LAG_MEAN_SATURATED_S`` or a p99 lag above
  ``LAG_P99_SATURATED_S``, the run is marked saturated: its latencies would measure the client,
  and the gate calls such a point INCONCLUSIVE. (TPOT, a difference of two stamps of one
  request, is hardly biased by lag; TTFT and E2E are.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, fields
from typing import Literal

from tasks import errors
from tasks.errors import ConfigError, StageFailed
from tasks.planning.metrics import RequestRecord

READ_BUFSIZE = 4 * 1024 * 1024
CPU_SATURATED = 0.90          # share of one core
LAG_MEAN_SATURATED_S = 0.005  # 5 ms: under 1% of the reference TTFTs (1-25 s)
LAG_P99_SATURATED_S = 0.050
LAG_TICK_S = 0.010
NO_TOKENIZE = (404, 405, 501)
# The child's environment variable carrying an endpoint's API key (sent as a Bearer token): never
# in the spec, which is written into every raw record file; its name is one that
# notifications.secret_values redacts.
API_KEY_ENV = "PDLIFT_LOAD_API_KEY"


@dataclass(frozen=True)
class LoadSpec:
    base_url: str                      # the server's root, e.g. http://127.0.0.1:8000
    scenario: str
    input_tokens: int
    output_tokens: int
    concurrency: int
    duration_s: float
    max_requests: int
    warmup_requests: int = 4
    repeat: int = 0
    mode: Literal["concurrency", "poisson"] = "concurrency"
    rate: float | None = None          # poisson: requests per second; None: from the warm-up
    chat: bool = False
    model: str | None = None           # None: the first model of GET /v1/models
    request_timeout_s: float = 600.0
    stagger: bool = True               # spread the workers' starts (concurrency mode; see above)
    seed: int = 0
    salt: int | None = None            # prompt header salt; None: random (unique across runs)

    def check(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ConfigError(f"benchmark target {self.base_url!r} is not an http(s) URL")
        if not (1 <= self.concurrency <= 4096 and self.max_requests >= 1 and self.duration_s > 0):
            raise ConfigError(f"{self.scenario}: need 1 <= concurrency <= 4096, max_requests >= 1 and "
                              f"duration_s > 0 (got {self.concurrency}, {self.max_requests}, {self.duration_s})")
        if self.mode == "poisson" and self.rate is not None and self.rate <= 0:
            raise ConfigError(f"{self.scenario}: the Poisson rate must be positive, got {self.rate}")


@dataclass(frozen=True)
class LoadResult:
    spec: LoadSpec
    model: str
    records: tuple[RequestRecord, ...]     # measured requests only, in send order
    warmup_requests: int
    # The measured span, for throughputs. Concurrency mode: the window the measured requests
    # were sent in, C in flight all along (sends per second there are completions per second;
    # adding the drain after it would count C requests' tail time without their successors).
    # Poisson mode: first measured send -> last measured end (the drain of any queue included).
    duration_s: float
    client_cpu_s: float
    client_cpu_share: float                # of one core, over the measured phase
    loop_lag_mean_s: float
    loop_lag_p99_s: float
    loop_lag_max_s: float
    saturated: bool
    saturation: str | None
    input_lengths_exact: bool
    input_note: str
    usage_missing: int                     # requests whose stream carried no usage chunk
    rate: float | None                     # the Poisson rate used


PROCESS_GRACE_S = 120.0     # prompt fitting and warm-up, beyond the run's own bounds


def spec_from_dict(data: dict) -> LoadSpec:
    return LoadSpec(**data)


def result_from_dict(data: dict) -> LoadResult:
    values = dict(data)
    values["spec"] = spec_from_dict(values["spec"])
    values["records"] = tuple(RequestRecord(**{**r, "chunk_ts": tuple(r["chunk_ts"])}) for r in values["records"])
    return LoadResult(**{f.name: values[f.name] for f in fields(LoadResult)})


def run_load(spec: LoadSpec, api_key: str | None = None) -> LoadResult:
    """Run one load point to completion in a child process (synchronous; bounded in time);
    ``api_key``: sent as a Bearer token (through the child's environment, never its arguments)."""
    spec.check()
    limit = spec.duration_s + 3 * spec.request_timeout_s + PROCESS_GRACE_S  # warm-up, ramp, drain
    env = {k: v for k, v in os.environ.items() if k != API_KEY_ENV}
    if api_key:
        env[API_KEY_ENV] = api_key
    try:
        proc = subprocess.run([sys.executable, "-m", "tasks.adapters.loadgen_run"], input=json.dumps(asdict(spec)),
                              capture_output=True, text=True, timeout=limit, env=env)
    except subprocess.TimeoutExpired as e:
        raise StageFailed(f"{spec.scenario} @ {spec.concurrency}: the load generator ran past its bound of "
                          f"{limit:.0f} s and was stopped") from e
    if proc.returncode == 3:
        failure = json.loads(proc.stdout)
        kind = getattr(errors, failure["error"], None)
        kind = kind if isinstance(kind, type) and issubclass(kind, errors.PdliftError) else StageFailed
        raise kind(failure["message"])
    if proc.returncode != 0:
        raise StageFailed(f"{spec.scenario} @ {spec.concurrency}: the load generator exited {proc.returncode}: "
                          f"{proc.stderr[-2000:]}")
    return result_from_dict(json.loads(proc.stdout))


def run_pair(candidate: LoadSpec, baseline: LoadSpec, baseline_api_key: str | None = None) -> tuple[LoadResult, LoadResult]:
    """One paired load point: the same request stream (give both specs the same ``salt`` and
    ``seed``) sent to both colours at once, each by its own process with its own C workers, so
    each colour runs at the point's concurrency and both live through the same moments. Their
    records share one clock (``time.perf_counter`` is CLOCK_MONOTONIC, machine-wide on Linux),
    which ``tasks.planning.paired_windows`` splits into windows."""
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="paired-load") as pool:
        ours = pool.submit(run_load, candidate)
        theirs = pool.submit(run_load, baseline, baseline_api_key)
        return ours.result(), theirs.result()
