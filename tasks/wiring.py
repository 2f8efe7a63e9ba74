"""The one place pdlift builds its clients and adapters, from the blueprint and the environment.

Tasks ask a ``Wiring`` for what their stage needs; stage procedures receive adapters as
arguments (typed against ``tasks.stages.ports``) and never import this module. Everything is
built on first use and per task run, never at import time, and closed with the wiring.

Where each system is, from standard configuration only (which is also how the sandbox is selected):

    AWS          boto3's own chain: AWS_ENDPOINT_URL_*, profiles, instance roles; the blueprint's region
    Kubernetes   one rule: an explicit kubeconfig when one is configured (KUBECONFIG; its current
                 context must name the blueprint's EKS cluster), else EKS DescribeCluster and a
                 presigned STS token, refreshed before it expires
    SSH          the blueprint's aws.ssh (PDLIFT_SSH_KEY_FILE overrides its key file)
    S3           boto3's classic engine from the same environment (never the CRT client)
    run state    the state store: PDLIFT_STATE_URI or the blueprint's state.uri (s3://bucket/prefix),
                 else the directory PDLIFT_STATE_DIR (default ./.pdlift); leases live there too
    load         the benchmark's load generator
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from pathlib import Path

from blueprints.schema import Blueprint
from tasks.adapters import aws_client
from tasks.adapters import eks as eks_adapter
from tasks.adapters.ec2_capacity import Ec2Capacity
from tasks.adapters.ec2_instances import Ec2Instances
from tasks.adapters.engine_http import EngineHttp
from tasks.adapters.kube_apply import KubeApply
from tasks.adapters.kubeconfig import api_client_from_kubeconfig
from tasks.adapters.kube_nodes import KubeNodes
from tasks.adapters.ledger_store import LedgerStore
from tasks.adapters.run_lease import RunLeases
from tasks.adapters.state_store import StateStore, open_uri
from tasks.adapters.loadgen import LoadResult, LoadSpec, run_load, run_pair
from tasks.adapters.s3 import WeightStore, s3_client
from tasks.adapters.service_routing import ServiceRouting
from tasks.adapters.ssh import NodeShell, SshNode, SshSettings
from tasks.errors import ConfigError, PdliftError, ResourceGone
from tasks.planning.lease import DEFAULT_TTL_S
from tasks.planning.manifests.common import DEPLOYMENT_LABEL
from tasks.planning.records import Fleet
from tasks.stages.efa_counters import NodeCounters
from tasks.stages.nodes import pin, ssh_target


class Wiring:
    """The adapters of one blueprint's systems. Use as a context manager, or call ``close``."""

    def __init__(self, bp: Blueprint, environ: Mapping[str, str] | None = None):
        self.bp = bp
        self._env = os.environ if environ is None else environ
        self._opened: list = []

    def __enter__(self) -> "Wiring":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for thing in reversed(self._opened):
            thing.close()
        self._opened.clear()

    def _keep(self, thing):
        self._opened.append(thing)
        return thing

    # --- AWS ---------------------------------------------------------------------------------

    @functools.cached_property
    def _session(self):
        return aws_client.session(self.bp.aws.region)

    @functools.cached_property
    def _ec2(self) -> tuple:
        return aws_client.clients(self._session, "ec2")

    @functools.cached_property
    def capacity(self) -> Ec2Capacity:
        describe, create = self._ec2
        return Ec2Capacity(describe, create, self._session.client("ssm", config=aws_client.DESCRIBE_CONFIG),
                           self._session.client("service-quotas", config=aws_client.DESCRIBE_CONFIG))

    @functools.cached_property
    def instances(self) -> Ec2Instances:
        return Ec2Instances(*self._ec2)

    @functools.cached_property
    def cluster(self) -> eks_adapter.Cluster:
        """The EKS cluster's endpoint, CA and service CIDR (what a node needs to join it)."""
        eks = self._session.client("eks", config=aws_client.DESCRIBE_CONFIG)
        return eks_adapter.describe_cluster(eks, self.bp.aws.eks.cluster)

    @functools.cached_property
    def weight_store(self) -> WeightStore:
        return WeightStore(s3_client(self.bp.aws.region))

    # --- Kubernetes --------------------------------------------------------------------------

    @functools.cached_property
    def kube_client(self):
        """The ApiClient of the blueprint's cluster, by the one rule in this module's docstring."""
        path = self._env.get("KUBECONFIG")
        if path:
            return self._keep(api_client_from_kubeconfig(path, self.bp.aws.eks.cluster))
        sts = self._session.client("sts", config=aws_client.DESCRIBE_CONFIG)
        return self._keep(eks_adapter.api_client(self.cluster, sts))

    @functools.cached_property
    def kube_nodes(self) -> KubeNodes:
        return KubeNodes(self.kube_client)

    @functools.cached_property
    def kube(self) -> KubeApply:
        return KubeApply(self.kube_client)

    @functools.cached_property
    def routing(self) -> ServiceRouting:
        return ServiceRouting(self.kube_client, self.kube)

    def kube_nodes_for_cleanup(self) -> tuple[KubeNodes | None, str]:
        """(the cluster's nodes adapter, "") or (None, why not): no cluster to reach must not stop
        a teardown from releasing what EC2 bills. ``why`` is empty when there is no cluster at all."""
        try:
            nodes = self.kube_nodes
            nodes.namespaces("pdlift.io/deployment=" + self.bp.name)
            return nodes, ""
        except ResourceGone:
            return None, ""  # the EKS cluster does not exist (any more): nothing to clean there
        except PdliftError as e:
            return None, f"{type(e).__name__}: {e}"

    # --- the GPU nodes and the engines -------------------------------------------------------

    @functools.cached_property
    def shell(self) -> NodeShell:
        return self._keep(NodeShell(SshSettings.from_spec(self.bp.aws.ssh, environ=self._env)))

    @functools.cached_property
    def engines(self) -> EngineHttp:
        return self._keep(EngineHttp())

    def efa_counters(self, fleet: Fleet | None) -> NodeCounters | None:
        """The canary's reader of the EFA counters, over SSH: the run's ``fleet``, host keys pinned
        from each instance's console output; without one (a cluster pdlift did not launch), the
        deployment's Kubernetes nodes at their InternalIP, keys from aws.ssh.known_hosts. None
        when the KV does not go over EFA."""
        bp = self.bp
        if bp.kv_transfer.protocol != "efa":
            return None
        port = bp.aws.ssh.port
        if fleet is not None:
            nodes = pin(self.instances, fleet.nodes)
            return NodeCounters(self.shell, {n.node_name: ssh_target(n, port) for n in nodes if n.node_name})
        targets = {}
        for node in self.kube_nodes.nodes(f"{DEPLOYMENT_LABEL}={bp.name}"):
            if node.address:
                targets[node.name] = SshNode(node.instance_id or node.name, node.address, (), port)
        return NodeCounters(self.shell, targets)

    @property
    def load(self) -> Callable[[LoadSpec], LoadResult]:
        """One benchmark load point against a server (the load generator, in its own process)."""
        return run_load

    @property
    def load_pair(self) -> Callable[..., tuple[LoadResult, LoadResult]]:
        """One paired load point: one request stream to the candidate and the baseline at once."""
        return run_pair

    @property
    def environ(self) -> Mapping[str, str]:
        """The environment the wiring reads (the weights stager is handed a custom S3 endpoint from it)."""
        return self._env

    # --- run state ---------------------------------------------------------------------------

    @property
    def state_uri(self) -> str | None:
        """The shared state store: PDLIFT_STATE_URI, else the blueprint's state.uri; None: local."""
        return self._env.get("PDLIFT_STATE_URI") or self.bp.state.uri

    @functools.cached_property
    def state(self) -> StateStore:
        uri = self.state_uri
        if self._env.get("PDLIFT_REQUIRE_SHARED_STATE") == "1" and not (uri or "").startswith("s3://"):
            # A worker whose disk goes with its pod (the Kubernetes pool): local state would be lost.
            raise ConfigError("this worker keeps no state on its disk (PDLIFT_REQUIRE_SHARED_STATE=1), but no "
                              "shared state store is configured: set PDLIFT_STATE_URI=s3://bucket/prefix (or "
                              "state.uri in the blueprint)")
        return self.open_state(uri)

    def open_state(self, uri: str | None) -> StateStore:
        """The state store at ``uri`` (None: this worker's directory), e.g. to copy state into."""
        return open_uri(uri, self.state_dir, self.bp.aws.region)

    @functools.cached_property
    def ledgers(self) -> LedgerStore:
        return LedgerStore(self.state)

    def leases(self, log=lambda _msg: None) -> RunLeases:
        ttl = float(self._env.get("PDLIFT_LEASE_TTL_S") or DEFAULT_TTL_S)
        return RunLeases(self.state, ttl_s=ttl, log=log)

    @property
    def state_dir(self) -> Path:
        """This worker's own state directory: PDLIFT_STATE_DIR, else ./.pdlift (the local store)."""
        return Path(self._env.get("PDLIFT_STATE_DIR") or Path.cwd() / ".pdlift")

    @property
    def state_root(self) -> Path:
        """Where a stage writes and reads the store's folders on this worker (the store itself when
        local; a cache of the S3 store otherwise: ``state.push`` / ``state.pull``)."""
        return self.state.local_root


class RegionWiring:
    """EC2 in one region for work that spans deployments (the leak sweep): no blueprint."""

    def __init__(self, region: str | None):
        self.region = region

    @functools.cached_property
    def _ec2(self) -> tuple:
        return aws_client.clients(aws_client.session(self.region), "ec2")

    @functools.cached_property
    def capacity(self) -> Ec2Capacity:
        return Ec2Capacity(*self._ec2)

    @functools.cached_property
    def instances(self) -> Ec2Instances:
        return Ec2Instances(*self._ec2)

    def weight_store(self, max_workers: int = 16) -> WeightStore:
        """S3 in this region (for work on a weights prefix that no blueprint names yet)."""
        return WeightStore(s3_client(self.region), max_workers=max_workers)
