"""Settings of the Kubernetes stand-in and the files it writes for its clients.

Optional settings file ``<state>/sandbox/kube/config.json`` (all keys optional)::

    {"cluster_name": "pdlift-sandbox",
     "sts_endpoint": "http://127.0.0.1:PORT",        # else $AWS_ENDPOINT_URL_STS, ...
     "credentials": {"testing": "testing"},            # access key id -> secret (dummy)
     "allowed_images": ["registry.example/vllm:*"],   # fnmatch; digests are always allowed
     "system_node": true,
     "gpu_operator": true,                             # a DCGM exporter on every GPU node
     "backoff_base_seconds": 0.5, "backoff_cap_seconds": 10,
     "probe_period_cap_seconds": 1.0}
"""

from __future__ import annotations

import base64
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Settings:
    state_dir: Path
    host: str = "127.0.0.1"
    port: int = 0
    cluster_name: str = "pdlift-sandbox"
    region: str = field(default_factory=lambda: os.environ.get("AWS_REGION")
                        or os.environ.get("AWS_DEFAULT_REGION") or "us-east-2")
    sts_endpoint: str | None = None
    credentials: dict[str, str] = field(default_factory=lambda: {"testing": "testing"})
    allowed_images: list[str] = field(default_factory=list)
    system_node: bool = True
    system_node_address: str = "127.0.0.10"
    # The GPU operator's DCGM exporter DaemonSet and Service (resources.gpu_operator_objects).
    gpu_operator: bool = True
    # The real kubelet backs off 10 s doubling to 5 min; the sandbox is faster so tests are.
    backoff_base_seconds: float = 0.5
    backoff_cap_seconds: float = 10.0
    # Probes run at most this far apart whatever periodSeconds says (real manifests say 10 s).
    probe_period_cap_seconds: float = 1.0
    join_poll_seconds: float = 0.5

    @property
    def kube_dir(self) -> Path:
        return self.state_dir / "sandbox" / "kube"

    @property
    def joins_dir(self) -> Path:
        return self.state_dir / "sandbox" / "joins"

    @classmethod
    def load(cls, state_dir: Path, **overrides) -> "Settings":
        s = cls(state_dir=state_dir)
        path = s.kube_dir / "config.json"
        if path.exists():
            data = json.loads(path.read_text())
            for k, v in data.items():
                if k in cls.__dataclass_fields__ and k != "state_dir":
                    setattr(s, k, v)
        for k, v in overrides.items():
            if v is not None:
                setattr(s, k, v)
        key, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
        if key and secret:
            s.credentials.setdefault(key, secret)
        return s

    def resolve_sts_endpoint(self) -> str | None:
        """Where tokens must point: configured, else the environment, else the AWS stand-in's
        endpoint file (read lazily: the AWS endpoint may start after this server)."""
        if self.sts_endpoint:
            return self.sts_endpoint
        for var in ("AWS_ENDPOINT_URL_STS", "AWS_ENDPOINT_URL"):
            if os.environ.get(var):
                return os.environ[var]
        aws_file = self.state_dir / "sandbox" / "aws" / "endpoint.json"
        try:
            data = json.loads(aws_file.read_text())
        except (OSError, ValueError):
            return None
        return data.get("sts") or data.get("url") or data.get("endpoint")


def write_client_files(s: Settings, server: str, ca_file: Path) -> tuple[Path, Path]:
    """Write endpoint.json (contract 4) and a kubeconfig whose user runs the EKS token plugin."""
    ca_data = base64.b64encode(ca_file.read_bytes()).decode()
    endpoint = s.kube_dir / "endpoint.json"
    endpoint.write_text(json.dumps({"server": server, "ca_file": str(ca_file),
                                    "ca_data": ca_data, "cluster_name": s.cluster_name}) + "\n")
    env = [{"name": "PYTHONPATH", "value": str(REPO_ROOT)}]
    sts = s.resolve_sts_endpoint()
    if sts:
        env.append({"name": "AWS_ENDPOINT_URL_STS", "value": sts})
    name = s.cluster_name
    kubeconfig = {
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": name, "cluster": {"server": server,
                                                "certificate-authority-data": ca_data}}],
        "users": [{"name": name, "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": sys.executable,
            "args": ["-m", "tasks.adapters.eks_token", "--cluster", name, "--region", s.region],
            "env": env, "interactiveMode": "Never", "provideClusterInfo": False}}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }
    path = s.kube_dir / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig, sort_keys=False))
    path.chmod(0o600)
    return path, endpoint
