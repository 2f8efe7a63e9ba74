"""The AWS endpoint's side of contract 1 (sandbox/README.md): booting a node per instance.

``NodeManager(state_dir, address_base, ssh_port)`` lives in ``sandbox.nodes.manager``; this
module only names the methods the endpoint calls, loads the class, and renders a console log
the way EC2 instances print it (cloud-init writes the SSH host keys between ``-----BEGIN SSH
HOST KEY KEYS-----`` and ``-----END SSH HOST KEY KEYS-----``; tools pin keys from there).
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from typing import Any, Protocol

DEFAULT_MANAGER = "sandbox.nodes.manager:NodeManager"
BEGIN_KEYS = "-----BEGIN SSH HOST KEY KEYS-----"
END_KEYS = "-----END SSH HOST KEY KEYS-----"


class BootedNode(Protocol):
    address: str
    host_key_lines: list[str]


class NodeManagerLike(Protocol):
    def boot(self, instance_id: str, user_data: str | None, tags: dict[str, str],
             network_nodes: list[str]) -> BootedNode: ...

    def terminate(self, instance_id: str) -> None: ...

    def console_output(self, instance_id: str) -> str: ...


def boot_node(manager: NodeManagerLike, instance_id: str, user_data: str | None,
              tags: dict[str, str], network_nodes: list[str], instance_type: str,
              zone: str) -> BootedNode:
    """``manager.boot`` with the contract's arguments, plus the instance type and AZ when the
    manager takes them (the real one shapes the node's GPUs and labels from them)."""
    accepted = inspect.signature(manager.boot).parameters
    extra: dict[str, Any] = {}
    if "instance_type" in accepted:
        extra["instance_type"] = instance_type
    if "availability_zone" in accepted:
        extra["availability_zone"] = zone
    return manager.boot(instance_id, user_data, tags, network_nodes, **extra)


def stop_all(manager: NodeManagerLike | None) -> None:
    """Stop the manager itself (its watcher thread), when it has such a method."""
    stop = getattr(manager, "stop_all", None)
    if callable(stop):
        stop()


def load_node_manager(spec: str, state_dir: Path, address_base: str,
                      ssh_port: int) -> NodeManagerLike:
    """``spec`` is ``module:Class``; the class is built with the contract's three arguments."""
    module_name, _, attr = spec.partition(":")
    factory: Any = getattr(importlib.import_module(module_name), attr or "NodeManager")
    return factory(state_dir, address_base, ssh_port)


def console_text(instance_id: str, address: str, host_key_lines: list[str],
                 node_log: str) -> str:
    """The node's own console log, with the cloud-init host key block if it lacks one."""
    if BEGIN_KEYS in node_log:
        return node_log
    hostname = "ip-" + address.replace(".", "-")
    lines = [node_log.rstrip("\n")] if node_log.strip() else []
    lines += [
        f"[   12.345678] cloud-init[1234]: Cloud-init finished for {instance_id}",
        "#############################################################",
        BEGIN_KEYS,
        *(f"{key.strip()} root@{hostname}" if len(key.split()) == 2 else key.strip()
          for key in host_key_lines),
        END_KEYS,
        "#############################################################",
    ]
    return "\n".join(lines) + "\n"
