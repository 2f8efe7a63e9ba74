"""How busy an engine process keeps its GPUs: what the DCGM exporter stand-in reads (``dcgm.py``).

DCGM's ``DCGM_FI_DEV_GPU_UTIL`` is the share of the last sample period during which a kernel
ran on the GPU (docs/sources.md#dcgm-exporter). The stand-in's kernel is a request in flight:
an engine process is busy while any of its ranks has a request admitted (prefilling, pulling
KV or decoding). Its cumulative busy seconds go to
``<state>/sandbox/gpu-activity/<node>/<namespace>_<pod>_<container>.json`` (rewritten atomically
every ``PUBLISH_S``), with the GPUs its container was given; the file goes away on shutdown.
A process outside a pod (tests run engines directly) or without GPUs publishes nothing. A
worker rank of a multi-node group (LWS worker index > 0) computes every batch its leader
does, but requests only reach the leader: its file names the leader's as the one to mirror.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

from sandbox.engines.settings import sandbox_dir

PUBLISH_S = 0.25


def activity_dir(node: str) -> Path:
    return sandbox_dir() / "gpu-activity" / node


class Activity:
    def __init__(self) -> None:
        self.in_flight = 0
        self._busy_s = 0.0
        self._since = 0.0

    def begin(self) -> None:
        if self.in_flight == 0:
            self._since = time.monotonic()
        self.in_flight += 1

    def end(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            self._busy_s += time.monotonic() - self._since

    def busy_until(self, wall: float) -> None:
        """Busy now and until ``wall`` (time.time()): a prefill answered ahead of its modelled
        finish still computes until then."""
        self.begin()
        asyncio.get_running_loop().call_later(max(0.0, wall - time.time()), self.end)

    def busy_s(self) -> float:
        """Seconds with at least one request in flight, up to now."""
        return self._busy_s + (time.monotonic() - self._since if self.in_flight else 0.0)


def file_name(namespace: str, pod: str, container: str) -> str:
    return f"{namespace}_{pod}_{container or 'main'}.json"


def _leader_pod(pod: str) -> str | None:
    """The group leader's pod of an LWS worker (``prefill-0-1`` -> ``prefill-0``); None for a leader."""
    index = os.environ.get("LWS_WORKER_INDEX", "0")
    return pod.rsplit("-", 1)[0] if index not in ("", "0") and pod.endswith(f"-{index}") else None


def _identity() -> tuple[str, str, str, str, int] | None:
    node, pod = os.environ.get("PDLIFT_SANDBOX_NODE", ""), os.environ.get("PDLIFT_SANDBOX_POD", "")
    try:
        gpus = int(os.environ.get("PDLIFT_SANDBOX_GPUS") or 0)
    except ValueError:
        gpus = 0
    if not node or "/" not in pod or gpus <= 0:
        return None
    namespace, name = pod.split("/", 1)
    return node, namespace, name, os.environ.get("PDLIFT_SANDBOX_CONTAINER", ""), gpus


async def publish(activity: Activity) -> None:
    """Keep this process's activity file current until cancelled (the engine's shutdown)."""
    ident = _identity()
    if ident is None:
        return
    node, namespace, pod, container, gpus = ident
    path = activity_dir(node) / file_name(namespace, pod, container)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    leader = _leader_pod(pod)
    mirror = {"mirror": file_name(namespace, leader, container)} if leader else {}
    try:
        while True:
            tmp.write_text(json.dumps({"namespace": namespace, "pod": pod, "container": container, "gpus": gpus,
                                       "busy_s": activity.busy_s(), "monotonic": time.monotonic(),
                                       "wall": time.time(), **mirror}))
            os.replace(tmp, path)
            await asyncio.sleep(PUBLISH_S)
    finally:
        path.unlink(missing_ok=True)
