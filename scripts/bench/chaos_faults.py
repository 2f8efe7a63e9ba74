"""The chaos bench's fault catalogue: what each fault does to the sandbox, and how it heals.

Every fault acts on the real processes of the local stack (the Prefect worker and server, the
SeaweedFS S3, the Kubernetes API stand-in, a node's sshd, the on-node stager) or on the AWS
endpoint's scripted faults (``POST /__sandbox/faults``, sandbox/aws/faults.py), never on
pdlift's own code. ``inject`` returns at once with a line saying what it did; a fault with a
duration restores the component from a timer thread, as an outage that ends by itself.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from sandbox.orchestrator.procs import descendants

NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class Fault:
    name: str
    stages: tuple[str, ...]   # where a random moment makes sense (it needs instances, a stager...)
    what: str                 # for docs/reliability.md and the table


CATALOGUE = (
    Fault("worker-sigkill", ("reserve", "launch", "fabric", "weights", "deploy", "benchmark-gate"),
          "SIGKILL of the worker's process group and its flow-run processes (a lost machine)"),
    Fault("prefect-restart", ("launch", "fabric", "weights", "deploy", "benchmark-gate"),
          "the Prefect server stopped and started again (SIGTERM, same port and database)"),
    Fault("s3-down", ("weights", "deploy", "benchmark-gate"),
          "SeaweedFS (the weights' S3 and the run state's) stopped for 5-30 s, then started again"),
    Fault("kube-down", ("launch", "deploy", "benchmark-gate"),
          "the Kubernetes API stand-in frozen (SIGSTOP) for 5-30 s: requests hang, then answer"),
    Fault("sshd-killed", ("fabric", "weights"),
          "one node's sshd killed (SIGKILL): the node no longer answers SSH"),
    Fault("ec2-burst", ("reserve", "launch", "fabric"),
          "a burst of 3-8 EC2 errors on every call: RequestLimitExceeded (503) or InternalError (500)"),
    Fault("stager-killed", ("weights",),
          "the stager process killed (SIGKILL) on one node mid-transfer"),
)
BY_NAME = {f.name: f for f in CATALOGUE}


def kill_tree(pid: int) -> int:
    """SIGKILL a process, its group and everything below it (Prefect 3's process worker starts each
    flow run in a session of its own, so the group alone would leave the run going on). Frozen
    first, so nothing is re-parented or started meanwhile. Returns how many processes it hit."""
    below = descendants(pid)
    for p in [pid, *below]:
        try:
            os.kill(p, signal.SIGSTOP)
        except OSError:
            pass
    below = sorted(set(below) | set(descendants(pid)))
    for p in [pid, *below]:
        for send in (lambda p=p: os.killpg(os.getpgid(p), signal.SIGKILL), lambda p=p: os.kill(p, signal.SIGKILL)):
            try:
                send()
            except OSError:
                pass
    return 1 + len(below)


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def stager_pids(instance_ids: set[str]) -> list[tuple[int, str]]:
    """(pid, instance id) of stager processes running on the given nodes (the node's sshd gives
    each session PDLIFT_SANDBOX_NODE, sandbox/nodes/manager.py)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and "stage_weights.py" in _cmdline(int(entry)):
            node = _environ(int(entry)).get("PDLIFT_SANDBOX_NODE", "")
            if node in instance_ids:
                found.append((int(entry), node))
    return found


def sshd_pid(state_dir: Path, instance_id: str) -> int | None:
    try:
        record = json.loads((state_dir / "sandbox" / "nodes" / instance_id / "node.json").read_text())
    except (OSError, ValueError):
        return None
    return record.get("sshd_pid")


def aws_admin(aws_url: str, method: str, path: str, body: dict | None = None):
    req = urllib.request.Request(aws_url.rstrip("/") + path, method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with NO_PROXY.open(req, timeout=10) as resp:
        return json.loads(resp.read() or b"null")


class Heal(threading.Thread):
    """Ends an outage after ``seconds``; ``join`` raises if the component did not come back (the
    trial is then the harness's failure, not pdlift's)."""

    def __init__(self, seconds: float, then: Callable[[], None]):
        super().__init__(name="chaos-heal", daemon=True)
        self.seconds, self.then, self.error = seconds, then, None

    def run(self) -> None:
        time.sleep(self.seconds)
        try:
            self.then()
        except BaseException as e:  # noqa: BLE001 (reported by join)
            self.error = e

    def join(self, timeout: float | None = None) -> None:
        super().join(timeout)
        if self.error is not None:
            raise RuntimeError(f"the outage did not end: {type(self.error).__name__}: {self.error}")


def later(seconds: float, then: Callable[[], None]) -> Heal:
    heal = Heal(seconds, then)
    heal.start()
    return heal
