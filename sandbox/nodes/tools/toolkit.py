"""What every sandbox node tool needs: which node it runs on, the other nodes, their faults.

The node manager writes `<state>/sandbox/nodes/<instance id>/node.json` for each node and a
wrapper per tool in the node's bin dir that exports `PDLIFT_SANDBOX_NODE_DIR` and runs the tool
with the system python3 (standard library only). Tools find their peers by scanning the other
node.json files: that is how `mpirun --host a,b` "reaches" the named hosts without SSH.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import time
from pathlib import Path

import faults as fault_file


class NodeError(RuntimeError):
    """The tool was started outside a sandbox node or the node registry is damaged."""


class Node:
    """One sandbox node as recorded in its node.json (read-only view)."""

    def __init__(self, record: dict):
        self.record = record
        self.instance_id: str = record["instance_id"]
        self.address: str = record["address"]
        self.hostname: str = record["hostname"]
        self.short_hostname: str = self.hostname.split(".")[0]
        self.state_dir = Path(record["state_dir"])
        self.node_dir = Path(record["node_dir"])
        self.profile: dict = record["profile"]

    def faults(self) -> dict:
        return fault_file.for_node(self.state_dir, self.address, self.instance_id)

    def gpu_count(self, faults: dict | None = None) -> int:
        faults = self.faults() if faults is None else faults
        return int(faults.get("gpus", self.profile["gpus"]))

    def efa_domains(self, faults: dict | None = None) -> list[str]:
        """The node's EFA device names (`rdmapNs0`), shortened by an `efa_devices` fault."""
        faults = self.faults() if faults is None else faults
        names = list(self.profile["efa_devices"])
        return names[: int(faults.get("efa_devices", len(names)))]

    def link_gbytes_per_s(self, faults: dict | None = None) -> float:
        """The node's network bandwidth in GB/s (3.2 Tbps = 400 GB/s), divided by slow_link."""
        faults = self.faults() if faults is None else faults
        return self.profile["link_gbps"] / 8.0 / float(faults.get("slow_link", 1) or 1)

    def is_up(self, faults: dict | None = None) -> bool:
        """Whether a peer could reach this node now: running, not scripted unreachable, and its
        sshd accepting connections (checked over TCP, as mpirun's ssh would: PIDs of other
        nodes are not visible from inside a node's PID namespace)."""
        faults = self.faults() if faults is None else faults
        if self.record.get("state") != "running" or faults.get("unreachable"):
            return False
        try:
            with socket.create_connection((self.address, int(self.record["ssh_port"])), timeout=2):
                return True
        except OSError:
            return False


def run_tool(main, argv: list[str]) -> None:
    """Exit with the tool's status; outside a sandbox node say so instead of a traceback."""
    try:
        code = main(argv)
    except (NodeError, fault_file.FaultFileError) as exc:
        print(f"{os.path.basename(sys.argv[0])}: {exc}", file=sys.stderr)
        code = 2
    sys.stdout.flush()
    sys.exit(code)


def this_node() -> Node:
    node_dir = os.environ.get("PDLIFT_SANDBOX_NODE_DIR")
    if not node_dir:
        raise NodeError("not on a sandbox node: PDLIFT_SANDBOX_NODE_DIR is not set")
    try:
        return Node(json.loads((Path(node_dir) / "node.json").read_text()))
    except (OSError, ValueError, KeyError) as exc:
        raise NodeError(f"sandbox node record unreadable in {node_dir}: {exc}") from exc


def all_nodes(state_dir: Path) -> list[Node]:
    nodes = []
    for path in sorted((state_dir / "sandbox" / "nodes").glob("*/node.json")):
        try:
            nodes.append(Node(json.loads(path.read_text())))
        except (OSError, ValueError, KeyError):
            continue  # a node being written right now; it is not a peer yet
    return nodes


def find_node(me: Node, name: str) -> Node | None:
    """Resolve a host name as mpirun / fi_pingpong would: address, instance id or hostname."""
    if name in ("localhost", "127.0.0.1", me.address, me.hostname, me.short_hostname):
        return me
    for node in all_nodes(me.state_dir):
        if node.record.get("state") == "terminated":
            continue
        if name in (node.address, node.instance_id, node.hostname, node.short_hostname):
            return node
    return None


def hang_until_killed(max_s: float | None = None) -> None:
    """Block like a hung collective: the process exits on SIGTERM/SIGHUP/SIGINT, when the reader
    of stdout goes away (the SSH channel closed) or when the parent dies. Returns after `max_s`
    (the tool's own timeout); without one it exits after PDLIFT_SANDBOX_HANG_MAX_S (default 1 h)
    so a forgotten process cannot outlive a test run by much."""
    sys.stdout.flush()
    sys.stderr.flush()

    def _die(signum, _frame):
        os._exit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, _die)
    bounded_by_caller = max_s is not None
    limit = max_s if max_s is not None else float(os.environ.get("PDLIFT_SANDBOX_HANG_MAX_S", 3600))
    deadline = time.monotonic() + limit
    parent = os.getppid()
    poller = select.poll()
    try:
        poller.register(sys.stdout.fileno(), 0)  # only POLLERR/POLLHUP: the reader is gone
    except (OSError, ValueError):
        poller = None
    while time.monotonic() < deadline:
        if os.getppid() != parent:
            os._exit(129)
        if poller is not None:
            if any(ev & (select.POLLERR | select.POLLHUP | select.POLLNVAL) for _, ev in poller.poll(200)):
                os._exit(141)
        else:
            time.sleep(0.2)
    if not bounded_by_caller:
        os._exit(124)
