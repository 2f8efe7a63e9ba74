"""SSH helpers for the sandbox node tests: host keys pinned from the console output, as the
product's SSH adapter must do it (RejectPolicy: unknown keys refused)."""

from __future__ import annotations

import base64
import random
import re
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

import paramiko

from sandbox.nodes import NodeManager
from sandbox.nodes.sshd import SshdError
from sandbox.nodes.tools import faults

USER_DATA = """MIME-Version: 1.0
Content-Type: multipart/mixed; boundary="//"

--//
Content-Type: text/x-shellscript; charset="us-ascii"

#!/bin/bash
echo not the node config

--//
Content-Type: application/node.eks.aws

---
apiVersion: node.eks.aws/v1alpha1
kind: NodeConfig
spec:
  cluster:
    name: pdlift-sandbox
    apiServerEndpoint: https://127.0.0.1:6443
    certificateAuthority: Y2E=
    cidr: 10.100.0.0/16
  kubelet:
    config:
      maxPods: 200
    flags:
      - --node-labels=pdlift.io/role=prefill,pdlift.io/deployment=sandbox-2p2d
      - --register-with-taints=nvidia.com/gpu=true:NoSchedule

--//--
"""

KEYS_BLOCK = re.compile(r"-----BEGIN SSH HOST KEY KEYS-----\n(.*?)-----END SSH HOST KEY KEYS-----", re.S)


def require_node_tools() -> None:
    """The nodes need Debian's openssh-server and libfabric-bin (scripts/test installs them)."""
    import os
    import shutil

    from tests.fixtures.strict import missing

    if not (os.path.exists("/usr/sbin/sshd") and shutil.which("fi_pingpong") and shutil.which("ssh-keygen")):
        missing("needs Debian openssh-server and libfabric-bin (scripts/setup installs them)")


def host_keys_from_console(console: str) -> list[tuple[str, str]]:
    match = KEYS_BLOCK.search(console)
    assert match, "console output has no SSH HOST KEY KEYS block"
    return [tuple(line.split()[:2]) for line in match.group(1).splitlines() if line.strip()]


def pinned_client(address: str, port: int, keys: list[tuple[str, str]], user: str, key_file: Path,
                  timeout: float = 5.0) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    for kind, blob in keys:
        client.get_host_keys().add(f"[{address}]:{port}", kind, paramiko.PKey.from_type_string(kind, base64.b64decode(blob)))
    client.connect(address, port=port, username=user, key_filename=str(key_file), allow_agent=False,
                   look_for_keys=False, timeout=timeout, banner_timeout=timeout, auth_timeout=timeout)
    return client


def run(client: paramiko.SSHClient, command: str, timeout: float = 20.0) -> tuple[int, str, str]:
    _, out, err = client.exec_command(command, timeout=timeout)
    stdout, stderr = out.read().decode(), err.read().decode()
    return out.channel.recv_exit_status(), stdout, stderr


def free_port(addresses: list[str], low: int = 20000, high: int = 30000, tries: int = 50) -> int:
    rng = random.Random()
    for _ in range(tries):
        port = rng.randint(low, high)
        try:
            for address in addresses:
                with socket.socket() as probe:
                    probe.bind((address, port))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port found for the sandbox nodes")


def listening(address: str, port: int) -> bool:
    """Whether a TCP socket listens on address:port (read from /proc, without connecting: a probe
    connection would be taken for the client by a one-shot server such as fi_pingpong)."""
    a, b, c, d = (int(x) for x in address.split("."))
    wanted = f"{d:02X}{c:02X}{b:02X}{a:02X}:{port:04X}"
    with open("/proc/net/tcp") as fh:
        return any(line.split()[1] == wanted and line.split()[3] == "0A" for line in list(fh)[1:])


@dataclass
class Cluster:
    manager: NodeManager
    state_dir: Path
    port: int
    key_file: Path
    clients: dict[str, paramiko.SSHClient] = field(default_factory=dict)

    def ssh(self, instance_id: str) -> paramiko.SSHClient:
        client = self.clients.get(instance_id)
        transport = client.get_transport() if client else None
        if transport is None or not transport.is_active():  # e.g. the node was made unreachable
            self.clients[instance_id] = self.connect(instance_id)
        return self.clients[instance_id]

    def connect(self, instance_id: str, keys=None) -> paramiko.SSHClient:
        node = self.manager.node(instance_id)
        keys = keys if keys is not None else host_keys_from_console(self.manager.console_output(instance_id))
        return pinned_client(node.address, self.port, keys, node.login_user, self.key_file)

    def set_faults(self, key: str, **values) -> None:
        faults.set_node_faults(self.state_dir, key, **values)


def boot_cluster(state_dir: Path, boots: list[tuple]) -> tuple[NodeManager, int]:
    """A NodeManager on a free high port with `boots` booted; another port is tried when the one
    picked is taken in the meantime (tests run beside a live sandbox and other suites)."""
    error: Exception | None = None
    for _ in range(5):
        port = free_port(["127.0.0.11", "127.0.0.12", "127.0.0.13"])
        manager = NodeManager(state_dir, address_base="127.0.0.11", ssh_port=port)
        try:
            for args in boots:
                manager.boot(*args)
        except SshdError as exc:
            manager.stop_all()
            error = exc
            continue
        return manager, port
    raise RuntimeError(f"no free port for the sandbox nodes: {error}")


def wait_until(predicate, timeout: float = 5.0, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return predicate()
