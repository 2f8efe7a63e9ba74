"""Helpers for the weight staging tests: the nodes handle, uploads and blueprints."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from pathlib import Path

import yaml

from tasks.adapters.ssh import SshNode
from tasks.parsing.console_output import parse_console_output

ROOT = Path(__file__).resolve().parents[3]
NVME = "/mnt/k8s-disks/0"
SMALL_NODE = "i-0small"
NODES = [f"i-0node{i}" for i in range(4)]


@dataclass
class Nodes:
    manager: object
    key_file: Path
    port: int
    user: str

    def ssh(self, instance_id: str) -> SshNode:
        booted = self.manager.node(instance_id)
        keys = parse_console_output(self.manager.console_output(instance_id))
        return SshNode(instance_id, booted.address, tuple(keys))

    def nvme(self, instance_id: str) -> Path:
        """The node's NVMe as this machine sees it (bind-mounted at /mnt/k8s-disks/0 on the node)."""
        return self.manager.node(instance_id).nvme_dir


def upload(s3_sandbox, files: dict[str, bytes]) -> tuple[str, str]:
    """Objects under a fresh prefix of the sandbox bucket; returns (uri, prefix)."""
    prefix = f"staging-test-{uuid.uuid4().hex[:8]}/"
    client = s3_sandbox.client()
    for name, body in files.items():
        client.put_object(Bucket=s3_sandbox.bucket, Key=prefix + name, Body=body)
    return f"s3://{s3_sandbox.bucket}/{prefix}", prefix


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_blueprint(path: Path, nodes: Nodes, weights_uri: str, local_path: str, **staging) -> Path:
    """The sandbox blueprint, pointed at these nodes, this model and this NVMe directory."""
    doc = yaml.safe_load((ROOT / "blueprints" / "sandbox-2p2d.yaml").read_text())
    doc["model"]["weights_uri"] = weights_uri
    doc["aws"]["ssh"].update(user=nodes.user, key_file=str(nodes.key_file), port=nodes.port)
    doc["staging"] = {"local_path": local_path, "concurrency": 8, "part_size_mb": 4, **staging}
    path.write_text(yaml.safe_dump(doc))
    return path
