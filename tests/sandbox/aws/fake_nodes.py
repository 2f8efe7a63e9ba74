"""A stand-in NodeManager with the contract's methods (sandbox/README.md item 1).

It starts no sshd: it hands out consecutive addresses and a well-formed ed25519 host key that
``host_key_line(instance_id)`` also gives the tests, so they can check what boto3 shows for
what the node manager returned. Tests assert on API answers, never on this object's state.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class FakeBootedNode:
    address: str
    host_key_lines: list[str] = field(default_factory=list)


class FakeNodeManager:
    def __init__(self, state_dir: Path, address_base: str, ssh_port: int) -> None:
        self._next = ipaddress.ip_address(address_base)
        self._nodes: dict[str, FakeBootedNode] = {}

    def boot(self, instance_id: str, user_data: str | None, tags: dict[str, str],
             network_nodes: list[str]) -> FakeBootedNode:
        node = FakeBootedNode(str(self._next), [host_key_line(instance_id)])
        self._next += 1
        self._nodes[instance_id] = node
        return node

    def terminate(self, instance_id: str) -> None:
        self._nodes.pop(instance_id, None)

    def console_output(self, instance_id: str) -> str:
        return f"[    0.000000] Linux version 6.1.0 (sandbox {instance_id})\n"


def host_key_line(instance_id: str) -> str:
    """A well-formed ed25519 public key line ("ssh-ed25519" + 32 key bytes), one per instance."""
    name = b"ssh-ed25519"
    key = hashlib.sha256(instance_id.encode()).digest()
    blob = len(name).to_bytes(4, "big") + name + len(key).to_bytes(4, "big") + key
    return f"ssh-ed25519 {base64.b64encode(blob).decode()}"
