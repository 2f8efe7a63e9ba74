"""`dcgm-exporter`: the DCGM exporter's stand-in on one sandbox GPU node.

What the real one does (docs/sources.md#dcgm-exporter): every collect interval it reads the
watched DCGM fields of each GPU and serves them at ``/metrics`` (default ``:9400``) in the
Prometheus text format; ``DCGM_FI_DEV_GPU_UTIL`` is the percentage of the last sample period
in which a kernel ran. With Kubernetes mapping on (``-k``/``DCGM_EXPORTER_KUBERNETES=true``, the
GPU operator's default) a GPU allocated to a pod carries ``namespace``, ``pod`` and
``container`` labels (from the kubelet's pod-resources API).

Here the node's GPUs (its allocatable ``nvidia.com/gpu`` from the join record, else 8) are given
in order to the engine containers whose activity files are on this node
(``sandbox/engines/gpu_activity.py``), as many each as their container asked for; a GPU's
utilisation over a collect interval is its container's busy seconds over the interval's
seconds (a group worker's are its leader's: it computes the same batches). Flags: ``-a/--address``, ``-c/--collect-interval`` (ms), ``-k/--kubernetes``,
``-f/--collectors`` (accepted, not read), with the environment variables the real one reads.
"""

from __future__ import annotations

import argparse
import hashlib
import http.server
import json
import os
import threading
import time

from sandbox.engines.gpu_activity import PUBLISH_S, activity_dir
from sandbox.engines.settings import bind_address, sandbox_dir

STALE_S = 8 * PUBLISH_S   # an activity file not rewritten for this long: its process is gone


def _parser() -> argparse.ArgumentParser:
    env = os.environ
    p = argparse.ArgumentParser(prog="dcgm-exporter")
    p.add_argument("-a", "--address", default=env.get("DCGM_EXPORTER_LISTEN", ":9400"))
    p.add_argument("-c", "--collect-interval", type=int, default=int(env.get("DCGM_EXPORTER_INTERVAL", "30000")))
    p.add_argument("-k", "--kubernetes", action="store_true",
                   default=env.get("DCGM_EXPORTER_KUBERNETES", "false").lower() == "true")
    p.add_argument("-f", "--collectors", default=env.get("DCGM_EXPORTER_COLLECTORS", ""))
    p.add_argument("--kubernetes-gpu-id-type", default="uid")
    return p


def _node_gpus(node: str) -> int:
    for path in (sandbox_dir() / "joins").glob("*.json"):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if record.get("name") == node:
            return int((record.get("allocatable") or {}).get("nvidia.com/gpu", 8))
    return 8


def _busy(record: dict) -> tuple[float, float]:
    """(busy seconds, at) of a process; a group worker's are its leader's, wherever that runs."""
    mirror = record.get("mirror")
    if mirror:
        for path in (sandbox_dir() / "gpu-activity").glob(f"*/{mirror}"):
            try:
                leader = json.loads(path.read_text())
                return float(leader["busy_s"]), float(leader["monotonic"])
            except (OSError, ValueError, KeyError):
                break
    return float(record["busy_s"]), float(record["monotonic"])


class Collector:
    def __init__(self, node: str, kubernetes: bool):
        self.node, self.kubernetes = node, kubernetes
        self.gpus = _node_gpus(node)
        self.last: dict[str, tuple[float, float]] = {}   # file -> (busy_s, monotonic) at the last collection
        self.util: list[tuple[float, dict[str, str]]] = [(0.0, {})] * self.gpus

    def collect(self) -> None:
        """One sample period ends: each GPU's utilisation over it."""
        now = time.time()
        holders: list[tuple[dict, float]] = []
        seen = {}
        for path in sorted(activity_dir(self.node).glob("*.json")):
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError):
                continue   # being rewritten
            if now - float(record.get("wall", 0)) > STALE_S:
                continue
            busy, mono = _busy(record)
            before = self.last.get(path.name)
            seen[path.name] = (busy, mono)
            share = 0.0
            if before and mono > before[1]:
                share = min(1.0, max(0.0, (busy - before[0]) / (mono - before[1])))
            holders.append((record, share))
        self.last = seen
        util: list[tuple[float, dict[str, str]]] = []
        for record, share in holders:
            mapping = {"namespace": record["namespace"], "pod": record["pod"],
                       "container": record.get("container") or ""} if self.kubernetes else {}
            util += [(100.0 * share, mapping)] * int(record.get("gpus", 0))
        self.util = (util + [(0.0, {})] * self.gpus)[:self.gpus]

    def render(self) -> str:
        lines = ["# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).", "# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
        for index, (value, mapping) in enumerate(self.util):
            uuid = hashlib.sha1(f"{self.node}/{index}".encode()).hexdigest()
            labels = {"gpu": str(index), "UUID": f"GPU-{uuid[:8]}-{uuid[8:12]}-{uuid[12:16]}-{uuid[16:20]}-{uuid[20:32]}",
                      "pci_bus_id": f"00000000:{0x53 + 16 * index:02X}:00.0", "device": f"nvidia{index}",
                      "modelName": "NVIDIA H200", "Hostname": self.node, "DCGM_FI_DRIVER_VERSION": "570.133.20",
                      **mapping}
            body = ",".join(f'{k}="{v}"' for k, v in labels.items())
            lines.append(f"DCGM_FI_DEV_GPU_UTIL{{{body}}} {round(value)}")
        return "\n".join(lines) + "\n"


class _Handler(http.server.BaseHTTPRequestHandler):
    """``/metrics`` and ``/health``, as the real exporter's Go HTTP server answers them
    (NVIDIA/dcgm-exporter's server registers those two routes; docs/sources.md#dcgm-exporter), and
    any other path as Go's net/http ``NotFound`` does: 404, "404 page not found". The product meets
    it in tests/flows/test_benchmark_gate.py (the server figures' GPU utilisation) and
    tests/sandbox/kube/test_kube_workloads.py (the GPU operator's DaemonSet). The standard
    library's server, not aiohttp as the engines use: one process of these runs on every node of
    every fleet a test run brings up (118 in one run), and aiohttp's import is 0.2-0.3 s of CPU each."""

    protocol_version = "HTTP/1.1"
    collector: Collector

    def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._answer(200, self.collector.render(), "text/plain; charset=utf-8")
        elif path == "/health":
            self._answer(200, "OK", "text/plain; charset=utf-8")
        else:
            self._answer(404, "404 page not found\n", "text/plain; charset=utf-8")

    def _answer(self, status: int, text: str, content_type: str) -> None:
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args) -> None:  # no access log, as before
        pass


def _serve(collector: Collector, host: str, port: int, interval_s: float) -> None:
    handler = type("Handler", (_Handler,), {"collector": collector})
    server = http.server.ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    print(f"Starting webserver on {host}:{port} (collect interval {interval_s * 1000:.0f} ms, "
          f"{collector.gpus} GPUs, kubernetes mapping {'on' if collector.kubernetes else 'off'})", flush=True)
    collector.collect()

    def collect_every_interval() -> None:  # until the container is stopped (SIGTERM ends the process)
        while True:
            time.sleep(interval_s)
            collector.collect()

    threading.Thread(target=collect_every_interval, name="collect", daemon=True).start()
    server.serve_forever(poll_interval=0.5)


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    node = os.environ.get("PDLIFT_SANDBOX_NODE") or os.environ.get("NODE_NAME") or ""
    port = int(args.address.rpartition(":")[2])
    collector = Collector(node, args.kubernetes)
    try:   # on the node's address whatever the host part says: the sandbox is loopback only
        _serve(collector, bind_address(), port, max(0.1, args.collect_interval / 1000.0))
    except KeyboardInterrupt:
        pass
    return 0
