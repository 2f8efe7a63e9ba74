"""SSH host keys: pinned from the EC2 console output or an operator's known_hosts, never learned.

The console's key lines (``tasks.parsing.console_output``) are what a node is pinned to; a key
that is missing or different is refused with ``HostKeyMismatch`` naming the host and both
fingerprints (OpenSSH's ``SHA256:...`` form).
"""

from __future__ import annotations

import base64
import binascii
import hashlib

import paramiko

from tasks.errors import ConfigError, HostKeyMismatch

def parse_key_line(line: str) -> paramiko.PKey:
    """``TYPE BASE64 [comment]`` -> a paramiko public key; ConfigError when it is not one."""
    parts = line.split()
    if len(parts) < 2:
        raise ConfigError(f"not an SSH public key line: {line[:60]!r}")
    try:
        return paramiko.PKey.from_type_string(parts[0], base64.b64decode(parts[1]))
    except (binascii.Error, ValueError, paramiko.SSHException) as e:
        raise ConfigError(f"not a usable SSH host key ({parts[0]}): {e}") from e


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's ``SHA256:...`` fingerprint, as `ssh-keygen -lf` prints it."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def host_id(address: str, port: int) -> str:
    """The name a known_hosts file (and paramiko) uses for address:port."""
    return address if port == 22 else f"[{address}]:{port}"


class PinnedKeyPolicy(paramiko.MissingHostKeyPolicy):
    """Refuse any host whose key is not pinned; paramiko calls this only for unknown keys."""

    def __init__(self, pinned: list[paramiko.PKey]):
        self._pinned = pinned

    def missing_host_key(self, client, hostname, key):
        known = ", ".join(f"{k.get_name()} {fingerprint(k)}" for k in self._pinned) or "none"
        raise HostKeyMismatch(
            f"{hostname}: host key {key.get_name()} {fingerprint(key)} is not pinned (pinned: {known}); "
            "refusing to connect. If the node was replaced, pin the new key from its console output")


def mismatch(hostname: str, offered: paramiko.PKey, expected: paramiko.PKey) -> HostKeyMismatch:
    return HostKeyMismatch(
        f"{hostname}: host key changed: offered {offered.get_name()} {fingerprint(offered)}, pinned "
        f"{expected.get_name()} {fingerprint(expected)}; refusing to connect (possible interception, "
        "or the node was rebuilt: check its console output before re-pinning)")
