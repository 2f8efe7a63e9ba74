"""A node's EFA device counters, as the efa kernel driver exports them, moved by KV sent over efa.

On a p5en the driver exports per-port counters under
``/sys/class/infiniband/rdmap*/ports/1/hw_counters/`` (``EFA_DEFINE_PORT_STATS`` in
amzn-drivers ``kernel/linux/efa/src/efa_verbs.c``; ``rdma statistic show link rdmapXs0/1``
shows the same). The sandbox node keeps them as plain files under
``<node dir>/sys/class/infiniband``, which sandbox/nodes/sshd.py mounts at
``/sys/class/infiniband`` inside the node's mount namespace, so ``cat`` over SSH reads them
where it would on a p5en. The engines run outside the node's namespaces (the kubelet's
pods do here), so they find the directory through their Kubernetes node's join record.

Which counters move (kv-path-proof.md, "EFA device counters"):
- a read (vLLM NixlConnector pulls on decode): ``rdma_read_bytes`` on the reader (decode) and
  ``rdma_read_resp_bytes`` on the responder (prefill);
- a write (Mooncake pushes, NixlPushConnector, SGLang's NIXL): ``rdma_write_bytes`` on the
  writer (prefill) and ``rdma_write_recv_bytes`` on the receiver (decode).
The bytes are striped over the node's devices, as NIXL's rails and Mooncake's EFA transport
stripe them. KV over TCP moves none of these: it goes through the ENA interface.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

# The byte counters of EFA_DEFINE_PORT_STATS that a KV transfer can move.
COUNTERS = ("tx_bytes", "rx_bytes", "send_bytes", "recv_bytes", "rdma_read_bytes", "rdma_read_resp_bytes",
            "rdma_write_bytes", "rdma_write_recv_bytes")
# (counter on the prefill side, counter on the decode side) per transfer direction
READ = ("rdma_read_resp_bytes", "rdma_read_bytes")
WRITE = ("rdma_write_bytes", "rdma_write_recv_bytes")


def sys_dir(node_dir: Path) -> Path:
    """What the node mounts at /sys/class/infiniband."""
    return Path(node_dir) / "sys" / "class" / "infiniband"


def create(node_dir: Path, devices: list[str]) -> Path:
    """Zeroed counters for the node's devices (a booted instance's counters start at 0)."""
    root = sys_dir(node_dir)
    for device in devices:
        counters = root / device / "ports" / "1" / "hw_counters"
        counters.mkdir(parents=True, exist_ok=True)
        for name in COUNTERS:
            (counters / name).write_text("0\n")
    return root


def node_dir_of(kube_node: str, state_dir: Path) -> Path | None:
    """The sandbox node directory behind a Kubernetes node name (from the join records)."""
    sandbox = Path(state_dir) / "sandbox"
    for record in sorted((sandbox / "joins").glob("*.json")):
        try:
            doc = json.loads(record.read_text())
        except (OSError, ValueError):
            continue
        if doc.get("name") == kube_node:
            return sandbox / "nodes" / str(doc.get("instance_id"))
    return None


def add(node_dir: Path, counter: str, nbytes: int) -> bool:
    """Add ``nbytes`` to ``counter``, striped over the node's devices. False when the node has no
    counters (a node joined without booting, or whose EFA devices are gone)."""
    root = sys_dir(node_dir)
    devices = sorted(p.name for p in root.glob("rdmap*")) if root.is_dir() else []
    if not devices or nbytes <= 0:
        return False
    share, rest = divmod(int(nbytes), len(devices))
    with open(root.parent / ".efa-counters.lock", "a") as lock:  # engines on one node add concurrently
        fcntl.flock(lock, fcntl.LOCK_EX)
        for i, device in enumerate(devices):
            path = root / device / "ports" / "1" / "hw_counters" / counter
            try:
                value = int(path.read_text().strip() or 0)
            except (OSError, ValueError):
                continue
            tmp = path.with_name(f".{counter}.{os.getpid()}")
            tmp.write_text(f"{value + share + (rest if i == 0 else 0)}\n")
            tmp.replace(path)
    return True


def read(node_dir: Path) -> dict[str, int]:
    """Each counter summed over the node's devices (the sandbox's own tests)."""
    root, out = sys_dir(node_dir), dict.fromkeys(COUNTERS, 0)
    for path in root.glob("rdmap*/ports/1/hw_counters/*"):
        if path.name in out:
            out[path.name] += int(path.read_text().strip() or 0)
    return out
