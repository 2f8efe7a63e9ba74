"""EKS: the cluster's API endpoint and CA, and an authenticated Kubernetes ApiClient for it.

The token is made the way `aws eks get-token` makes it (a presigned STS GetCallerIdentity URL,
``tasks.adapters.eks_token``) and regenerated before it can expire, so long waits keep working.
"""

from __future__ import annotations

import base64
import contextlib
import os
import tempfile
import weakref
from dataclasses import dataclass

from kubernetes import client as k8s

from tasks.adapters import eks_token
from tasks.adapters.aws_client import call


@dataclass(frozen=True)
class Cluster:
    name: str
    endpoint: str
    ca_data: str          # base64 PEM, as EKS returns it
    service_cidr: str


def describe_cluster(eks_client, name: str) -> Cluster:
    out = call(eks_client.describe_cluster, "eks:DescribeCluster", name=name)["cluster"]
    cidr = (out.get("kubernetesNetworkConfig") or {}).get("serviceIpv4Cidr", "")
    return Cluster(name, out["endpoint"], (out.get("certificateAuthority") or {}).get("data", ""), cidr)


def _remove_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)


class EksApiClient(k8s.ApiClient):
    """An ApiClient whose cluster CA is a file of its own (urllib3 reads it for each new connection),
    removed when the client is closed, or else when it is collected or the process exits: a worker
    runs many flows, and each left a ``pdlift-ca-*.pem`` in the temporary directory before."""

    def __init__(self, configuration: k8s.Configuration, ca_path: str):
        super().__init__(configuration)
        self._remove_ca = weakref.finalize(self, _remove_quietly, ca_path)

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._remove_ca()


def api_client(cluster: Cluster, sts_client) -> EksApiClient:
    """An ApiClient that presents a fresh EKS token on every request."""
    config = k8s.Configuration()
    config.host = cluster.endpoint
    ca_file = tempfile.NamedTemporaryFile("wb", prefix="pdlift-ca-", suffix=".pem", delete=False)
    with ca_file:
        ca_file.write(base64.b64decode(cluster.ca_data))
    os.chmod(ca_file.name, 0o600)
    config.ssl_ca_cert = ca_file.name
    config.verify_ssl = True

    def refresh(conf: k8s.Configuration) -> None:
        conf.api_key["authorization"] = eks_token.get_token(sts_client, cluster.name)
        conf.api_key_prefix["authorization"] = "Bearer"

    config.refresh_api_key_hook = refresh
    try:
        refresh(config)
    except BaseException:
        _remove_quietly(ca_file.name)
        raise
    return EksApiClient(config, ca_file.name)
