"""One simulated engine rank: its counters, limits, metrics and request-level faults."""

from __future__ import annotations

import asyncio
import math
import os
import sys
import time
import uuid
from pathlib import Path

from sandbox.engines.config import EngineConfig
from sandbox.engines.gpu_activity import Activity
from sandbox.engines.metrics import BYTE_BUCKETS, Registry
from sandbox.engines.settings import Settings, sandbox_dir, state_dir
from sandbox.nodes import efa_counters


def log(message: str, level: str = "INFO") -> None:
    """Engine-style log line on stdout (the pod log)."""
    stamp = time.strftime("%m-%d %H:%M:%S")
    print(f"{level} {stamp} [sandbox] {message}", flush=True)


PROMPT_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")


class KvCounters:
    """Process-wide KV transfer counters, shared by every rank of the process: only what stock
    engines export, and the node's EFA device counters (sandbox/nodes/efa_counters.py).

    - vLLM with NixlConnector, on the side that reads the KV (decode; ``nixl/stats.py``,
      ``NixlPromMetrics``): ``vllm:nixl_bytes_transferred`` and ``vllm:nixl_xfer_time_seconds``
      histograms, ``vllm:nixl_num_failed_transfers_total``. vLLM's MooncakeConnector exports no
      connector metrics (``mooncake/stats.py``: "TODO(mooncake-stats): add MooncakePromMetrics").
    - SGLang with ``--enable-metrics`` (``observability/metrics_collector.py``):
      ``sglang:per_stage_req_latency_seconds`` with stage ``prefill_transfer_kv_cache`` on the
      prefill and ``decode_transferred`` on the decode, ``sglang:num_transfer_failed_reqs_total``
      and ``sglang:num_bootstrap_failed_reqs_total`` on both, and on the prefill the last
      transfer's ``sglang:kv_transfer_latency_ms``/``kv_transfer_total_mb`` (MiB)/
      ``kv_transfer_speed_gb_s`` gauges (docs/sources.md#engine-metrics).
    - The node's EFA counters move only when the KV goes over efa (kv-path-proof.md): a read
      (vLLM's NixlConnector pulls) or a write (Mooncake, NixlPushConnector, SGLang's NIXL)."""

    def __init__(self, cfg: EngineConfig, protocol: str):
        self.protocol = protocol
        self.registry = Registry()
        r = self.registry
        kv = cfg.kv
        self.native_nixl = cfg.engine == "vllm" and kv is not None and kv.library == "nixl"
        reads = cfg.engine == "vllm" and kv is not None and kv.connector == "NixlConnector"
        self.efa_counters = efa_counters.READ if reads else efa_counters.WRITE
        self.node_dir = node_dir()
        self.native_sglang = cfg.engine == "sglang" and kv is not None and cfg.metrics_enabled
        if self.native_sglang:
            labels = {"model_name": cfg.served_names[0], "engine_type": cfg.role, "tp_rank": "0", "pp_rank": "0",
                      "moe_ep_rank": "0"}
            self.sglang_labels = labels
            self.last_transfer = (0.0, 0.0)  # (ms, MiB); the gauges read 0 until the first transfer
            r.histogram("sglang:per_stage_req_latency_seconds", "The latency of each stage of requests.",
                        labelled=True)
            r.counter("sglang:num_transfer_failed_reqs_total", "The number of transfer failed requests.")
            r.counter("sglang:num_bootstrap_failed_reqs_total", "The number of bootstrap failed requests.")
            r.inc("sglang:num_transfer_failed_reqs_total", 0, **labels)
            r.inc("sglang:num_bootstrap_failed_reqs_total", 0, **labels)
            if cfg.role == "prefill":
                r.gauge("sglang:kv_transfer_latency_ms", "The transfer latency of the KV cache in ms.",
                        lambda: [(labels, self.last_transfer[0])])
                r.gauge("sglang:kv_transfer_total_mb", "The total number of tokens transferred in the KV cache.",
                        lambda: [(labels, self.last_transfer[1])])
                r.gauge("sglang:kv_transfer_speed_gb_s", "The transfer speed of the KV cache in GB/s.",
                        lambda: [(labels, self.last_transfer[1] / 1024 / (self.last_transfer[0] / 1000.0)
                                  if self.last_transfer[0] else 0.0)])
        if self.native_nixl:
            r.histogram("vllm:nixl_bytes_transferred", "Bytes transferred per NIXL KV Cache transfer.", BYTE_BUCKETS)
            r.histogram("vllm:nixl_xfer_time_seconds", "Transfer duration for NIXL KV Cache transfers.")
            r.counter("vllm:nixl_num_failed_transfers_total", "Number of failed NIXL KV Cache transfers.")
            r.inc("vllm:nixl_num_failed_transfers_total", 0)

    def moved(self, direction: str, protocol: str, nbytes: int, seconds: float) -> None:
        r = self.registry
        if protocol == "efa" and self.node_dir is not None:
            efa_counters.add(self.node_dir, self.efa_counters[0 if direction == "sent" else 1], nbytes)
        if self.native_nixl and direction == "received":
            r.observe("vllm:nixl_bytes_transferred", nbytes)
            r.observe("vllm:nixl_xfer_time_seconds", seconds)
        if self.native_sglang:
            stage = "prefill_transfer_kv_cache" if direction == "sent" else "decode_transferred"
            r.observe("sglang:per_stage_req_latency_seconds", seconds, **self.sglang_labels, stage=stage)
            if direction == "sent":
                self.last_transfer = (seconds * 1000.0, nbytes / float(1 << 20))

    def failed(self, reason: str) -> None:
        if self.native_nixl:
            self.registry.inc("vllm:nixl_num_failed_transfers_total", 1)
        if self.native_sglang:
            name = ("sglang:num_bootstrap_failed_reqs_total" if reason in ("not_found", "unreachable")
                    else "sglang:num_transfer_failed_reqs_total")
            self.registry.inc(name, 1, **self.sglang_labels)


def node_efa_devices() -> int:
    """How many EFA devices the engine's node has (16, a p5en's, off a node)."""
    where = node_dir()
    root = efa_counters.sys_dir(where) if where else None
    found = len(list(root.glob("rdmap*"))) if root is not None and root.is_dir() else 0
    return found or 16


def node_dir() -> Path | None:
    """The sandbox node this engine runs on: ``PDLIFT_SANDBOX_NODE_DIR``, or the node directory
    behind the pod's Kubernetes node (``PDLIFT_SANDBOX_NODE``, set by the kubelet stand-in)."""
    explicit = os.environ.get("PDLIFT_SANDBOX_NODE_DIR")
    if explicit:
        return Path(explicit)
    kube_node = os.environ.get("PDLIFT_SANDBOX_NODE")
    return efa_counters.node_dir_of(kube_node, state_dir()) if kube_node else None


class EngineState:
    def __init__(self, cfg: EngineConfig, settings: Settings, kv: KvCounters, rank: int, port: int,
                 activity: Activity | None = None):
        self.cfg, self.settings, self.kv, self.rank, self.port = cfg, settings, kv, rank, port
        self.activity = activity or Activity()   # shared by the process's ranks: one set of GPUs
        self.engine_id = str(uuid.uuid4())
        self.started = time.monotonic()
        # When its API began to listen (server._serve sets it): the slow_start fault counts from
        # there, so its 503s are answered however long the process took to get there (a starved
        # one once went from no answer straight to 200). As vLLM: run_server builds the engine
        # client (build_async_engine_client) before serve_http binds the port, and /health then
        # answers 503 while the engine is not healthy (vllm/entrypoints/openai/api_server.py). The
        # product meets it in tests/sandbox/deploy/test_failures.py (slow_start_s 120).
        self.listening_since: float | None = None
        self.group_ready = asyncio.Event()
        self.slots = asyncio.Semaphore(cfg.max_num_seqs)
        slots = settings.latency.prefill_slots
        self.prefill_slots = asyncio.Semaphore(slots) if slots > 0 else None
        self.running = 0
        self.waiting = 0
        self.seen = 0  # requests received, for the error-rate fault
        self.served = 0  # requests finished, for the exit-after-requests fault
        self.draining = False
        self.spec_last = (0.0, 0.0)     # SGLang's last-batch acceptance rate and length
        self._drafted_total = self._accepted_total = 0
        self.metrics = self._registry()

    @property
    def prefix(self) -> str:
        return "vllm:" if self.cfg.engine == "vllm" else "sglang:"

    @property
    def queue_metric(self) -> str:
        # vLLM: vllm/v1/metrics/loggers.py; SGLang: python/sglang/srt/metrics/collector.py
        # (docs/sources.md#engine-metrics).
        return "vllm:request_queue_time_seconds" if self.cfg.engine == "vllm" else "sglang:queue_time_seconds"

    def admitted(self) -> None:
        """A request got its slot (it is running now)."""
        self.running += 1
        self.activity.begin()

    def released(self) -> None:
        self.running -= 1
        self.activity.end()

    def _registry(self) -> Registry:
        labels = {"model_name": self.cfg.served_names[0]}
        if self.cfg.engine == "vllm":
            labels["engine"] = str(self.rank)
        r, p = Registry(labels), self.prefix
        running = "num_requests_running" if self.cfg.engine == "vllm" else "num_running_reqs"
        waiting = "num_requests_waiting" if self.cfg.engine == "vllm" else "num_queue_reqs"
        r.gauge(p + running, "Requests running on the engine.", lambda: [({}, self.running)])
        r.gauge(p + waiting, "Requests waiting for a slot.", lambda: [({}, self.waiting)])
        for name, text in (("time_to_first_token_seconds", "Time to first token."),
                           ("inter_token_latency_seconds", "Time between output tokens."),
                           ("e2e_request_latency_seconds", "End-to-end request latency.")):
            r.histogram(p + name, text)
        r.histogram(self.queue_metric, "Time waiting for a slot.")
        if self.cfg.spec_tokens:
            self._spec_decode_metrics(r)
        r.counter(p + "prompt_tokens_total", "Prompt tokens processed.")
        if self.cfg.engine == "vllm":  # vllm/v1/metrics/loggers.py (vllm#33290), zeros from the start
            r.counter("vllm:prompt_tokens_by_source_total", "Number of prompt tokens by source.")
            for source in PROMPT_SOURCES:
                r.inc("vllm:prompt_tokens_by_source_total", 0, source=source)
        r.counter(p + "generation_tokens_total", "Tokens generated.")
        r.counter(p + "request_success_total", "Finished requests, by reason.")
        r.counter(p + "external_prefix_cache_queries_total", "Prompt tokens looked up in the KV connector.")
        r.counter(p + "external_prefix_cache_hits_total", "Prompt tokens loaded through the KV connector.")
        r.counter("pdlift_sandbox_request_errors_total", "Requests failed (injected errors, KV failures).")
        return r

    def _spec_decode_metrics(self, r: Registry) -> None:
        """Speculative decoding's figures by the engines' names (vLLM: counters of
        vllm/v1/spec_decode/metrics.py; SGLang: gauges of collector.py; docs/sources.md#engine-metrics)."""
        if self.cfg.engine == "vllm":
            for name, text in (("drafts", "Number of spec decoding drafts."), ("draft_tokens", "Number of draft tokens."),
                               ("accepted_tokens", "Number of accepted tokens.")):
                r.counter(f"vllm:spec_decode_num_{name}_total", text)
                r.inc(f"vllm:spec_decode_num_{name}_total", 0)
        else:   # SGLang's gauges hold the last batch's figures, 0 before the first
            r.gauge("sglang:spec_accept_rate", "The average acceptance rate of speculative decoding.",
                    lambda: [({}, self.spec_last[0])])
            r.gauge("sglang:spec_accept_length", "The average acceptance length of speculative decoding.",
                    lambda: [({}, self.spec_last[1])])

    def prompt_tokens(self, source: str, n: int) -> None:
        """Where a request's prompt tokens came from: computed here, or loaded over the connector."""
        if self.cfg.engine == "vllm" and n > 0:
            self.metrics.inc("vllm:prompt_tokens_by_source_total", n, source=source)

    def drafted(self, steps: int) -> None:
        """A request's ``steps`` decode steps, each drafting ``spec_tokens`` tokens of which the
        latency model's share is accepted (the stand-in's acceptance, not a measured one)."""
        k = self.cfg.spec_tokens
        if not k or steps <= 0:
            return
        drafted = steps * k
        # Whole tokens, with the remainder carried: over many requests the share is the model's.
        total = self._drafted_total + drafted
        target = round(total * self.settings.latency.spec_acceptance)
        accepted = target - self._accepted_total
        self._drafted_total, self._accepted_total = total, target
        if self.cfg.engine == "vllm":
            self.metrics.inc("vllm:spec_decode_num_drafts_total", steps)
            self.metrics.inc("vllm:spec_decode_num_draft_tokens_total", drafted)
            self.metrics.inc("vllm:spec_decode_num_accepted_tokens_total", accepted)
        else:
            self.spec_last = (accepted / drafted, 1.0 + accepted / steps)

    def render_metrics(self) -> str:
        return self.metrics.render() + self.kv.registry.render()

    # --- readiness and faults --------------------------------------------------------------

    def ready(self) -> bool:
        slow = self.settings.faults.slow_start_s
        return (self.group_ready.is_set() and not self.draining and self.listening_since is not None
                and time.monotonic() - self.listening_since >= slow)

    def next_is_error(self) -> bool:
        """Every request whose running count crosses a multiple of 1/rate fails: exactly the rate."""
        self.seen += 1
        rate = self.settings.faults.error_rate
        return rate > 0 and math.floor(self.seen * rate) > math.floor((self.seen - 1) * rate)

    def finished_one(self) -> None:
        self.served += 1
        faults = self.settings.faults
        if not faults.exit_after_requests or self.served < faults.exit_after_requests:
            return
        if faults.exit_once:
            marker = sandbox_dir() / "engine-faults" / f"{self.settings.ident['pod'] or self.port}.exited"
            if marker.exists():
                return
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.write_text("exited\n")
        log(f"EngineCore died unexpectedly after {self.served} requests (injected fault)", "ERROR")
        asyncio.get_running_loop().call_later(0.05, _exit_now)


def _exit_now() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)
