"""The bandwidth model behind the sandbox nccl-tests: what a healthy p5en would measure.

Anchors (see the fabric-validation reference, section 2):
- one node, 8 H200 on NVSwitch: all_reduce busbw ~480 GB/s at 16 GiB (Azure NHC floor 431);
- across nodes the network is the limit: 3.2 Tbps = 400 GB/s per node; 2-node all_reduce busbw
  ~390 GB/s; alltoall busbw = per-GPU link (50 GB/s) x ((n-1)/n)/((M-1)/M) x 0.85 (measured
  p5 runs sit at 79-88 % of that ceiling: ~80 GB/s at 2 nodes);
- the slowest participating node's link sets the pace (`slow_link` divides it), and a job whose
  NCCL fell back to sockets (`no_efa_evidence`) runs at TCP speed.
Transfer time is size / peak, stretched up to 2x for small messages (`HALF_*`), plus a fixed latency, plus a
deterministic +-0.5 % jitter so robust statistics over nodes never see a zero spread.
"""

from __future__ import annotations

import hashlib

MIB = 1 << 20
NVLINK_LAT_US, NET_LAT_US = 20.0, 60.0
HALF_NVLINK, HALF_NET = 16 * MIB, 32 * MIB
SOCKET_GBYTES = 10.0  # NCCL over the ENA socket transport, GB/s per node
LOCAL_COPY_GBYTES = 2000.0  # a 1-rank "collective" is a device-local copy

COLLECTIVES = {
    # binary: (redop printed or None = the -o op, root printed, NVLink busbw peak GB/s)
    "all_reduce_perf": (None, -1, 486.0),
    "alltoall_perf": ("none", -1, 340.0),
    "sendrecv_perf": (None, -1, 350.0),
}


def bus_factor(binary: str, nranks: int) -> float:
    if binary == "all_reduce_perf":
        return 2.0 * (nranks - 1) / nranks
    if binary == "alltoall_perf":
        return (nranks - 1) / nranks
    return 1.0


def peak_busbw(binary: str, links: list[float], nranks: int, socket: bool) -> float:
    """Large-message busbw (GB/s) for `nranks` GPUs on len(links) nodes with those links (GB/s)."""
    nodes = len(links)
    nvlink = COLLECTIVES[binary][2]
    if nodes <= 1:
        return nvlink
    link = min(links)
    if socket:
        link = min(link, SOCKET_GBYTES)
    per_gpu = link / max(1, nranks // nodes)
    if binary == "all_reduce_perf":
        return min(nvlink, link * (0.98 if nodes == 2 else 0.9))
    if binary == "alltoall_perf":
        return min(nvlink, per_gpu * ((nranks - 1) / nranks) / ((nodes - 1) / nodes) * 0.85)
    return min(nvlink, per_gpu * 0.9)


def jitter(seed: str) -> float:
    digest = hashlib.sha256(seed.encode()).digest()
    return (int.from_bytes(digest[:4], "big") / 0xFFFFFFFF - 0.5) * 0.01


def measure(binary: str, nbytes: int, nranks: int, nodes: int, peak: float, seed: str) -> tuple[float, float, float]:
    """(time us, algbw GB/s, busbw GB/s) of one row."""
    lat = NET_LAT_US if nodes > 1 else NVLINK_LAT_US
    if nbytes <= 0:
        return lat, 0.0, 0.0
    factor = bus_factor(binary, nranks)
    alg_peak = peak / factor if factor > 0 else LOCAL_COPY_GBYTES
    half = HALF_NET if nodes > 1 else HALF_NVLINK
    transfer_us = nbytes / (alg_peak * 1e3) * (1.0 + half / (nbytes + half))
    time_us = (lat + transfer_us) * (1.0 + jitter(seed))
    algbw = nbytes / time_us / 1e3
    return time_us, algbw, algbw * factor
