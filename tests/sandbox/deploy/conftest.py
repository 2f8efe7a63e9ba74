"""Deploy tests: a blueprint per scenario (its own name, so its own nodes and namespaces) and four
GPU nodes joined to the Kubernetes stand-in for it, as the launch stage would leave them.

Each ``Site`` writes the sandbox blueprint with a unique name and router port to a file (the
CLI needs one), joins 2 prefill + 2 decode nodes labelled the way stage 2 labels them, and at
the end deletes what was deployed and the join records.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from blueprints.loader import load_blueprint
from blueprints.schema import Blueprint
from tasks.adapters.engine_http import EngineHttp
from tasks.adapters.kube_apply import KubeApply
from tasks.adapters.ssh import NodeShell, SshNode, SshSettings
from tasks.stages.efa_counters import NodeCounters
from sandbox.nodes import NodeManager, ensure_client_key
from tasks.stages.deploy_wait import WaitLimits
from tests.fixtures.kube import wait_for
from sandbox.s3 import free_port

REPO = Path(__file__).resolve().parents[3]
SANDBOX_BLUEPRINT = REPO / "blueprints" / "sandbox-2p2d.yaml"
# Fast enough for the stand-in, whose pods start in seconds; the fail-fast paths do not wait.
FAST = WaitLimits(scheduled_s=30, started_s=60, ready_s=60, router_s=30, unschedulable_grace_s=2, poll_s=1)


@dataclass
class Site:
    sandbox: object
    api: client.ApiClient
    path: Path
    blueprint: Blueprint
    nodes: NodeManager
    instance_ids: list[str] = field(default_factory=list)
    targets: dict[str, SshNode] = field(default_factory=dict)  # Kubernetes node name -> SSH target
    roles: dict[str, str] = field(default_factory=dict)  # Kubernetes node name -> prefill | decode
    _shell: NodeShell | None = None

    @property
    def known_hosts(self) -> Path:
        return self.path.with_suffix(".known_hosts")

    @property
    def kube(self) -> KubeApply:
        return KubeApply(self.api)

    @property
    def fabric(self) -> NodeCounters:
        """The canary's EFA counters of this site's nodes, read over real SSH as the deploy task does."""
        if self._shell is None:
            self._shell = NodeShell(SshSettings(user=self.nodes.login_user, key_file=str(self.nodes.key_file),
                                                port=self.nodes.ssh_port, connect_timeout_s=3))
        return NodeCounters(self._shell, self.targets)

    def join_nodes(self, gpus: int = 8, extra_labels: dict[str, str] | None = None) -> None:
        """Boot four sandbox nodes (real sshd, EFA counters) and join them as stage 2 leaves them
        (with ``extra_labels`` besides: a second fleet's ``pdlift.io/run``)."""
        bp = self.blueprint
        for i, role in enumerate(["prefill", "prefill", "decode", "decode"]):
            booted = self.nodes.boot("i-" + uuid.uuid4().hex[:17])
            address = booted.address
            labels = {"pdlift.io/role": role, "pdlift.io/deployment": bp.name,
                      "node.kubernetes.io/instance-type": bp.aws.instance_type,
                      "topology.kubernetes.io/zone": "us-east-2a",
                      "topology.k8s.aws/network-node-layer-1": "nn-l1",
                      "topology.k8s.aws/network-node-layer-2": "nn-l2",
                      "topology.k8s.aws/network-node-layer-3": f"nn-l3-{role}", **(extra_labels or {})}
            allocatable = {"nvidia.com/gpu": str(gpus), "vpc.amazonaws.com/efa": "16", "hugepages-2Mi": "8Gi"}
            name = f"ip-{address.replace('.', '-')}.us-east-2.compute.internal"
            self.instance_ids.append(self.sandbox.join(name, labels, [], allocatable, address=address,
                                                       instance_id=booted.instance_id))
            self.targets[name] = SshNode(booted.instance_id, address, booted.host_key_lines, booted.ssh_port)
            self.roles[name] = role
            with open(self.known_hosts, "a") as fh:  # for the CLI's deploy, which has no launched fleet
                fh.writelines(f"[{address}]:{booted.ssh_port} {line}\n" for line in booted.host_key_lines)
        core = client.CoreV1Api(self.api)
        wait_for(lambda: len(core.list_node(label_selector=f"pdlift.io/deployment={bp.name}").items)
                 == len(self.instance_ids), what=f"the nodes of {bp.name} to join")

    def cleanup(self) -> None:
        core = client.CoreV1Api(self.api)
        names = [self.blueprint.name] + [f"{self.blueprint.name}-{c}" for c in ("blue", "green")]
        for ns in names:
            try:
                core.delete_namespace(ns)
            except client.ApiException as e:
                if e.status != 404:
                    raise
        for iid in self.instance_ids:
            self.sandbox.leave(iid)
            self.nodes.terminate(iid)
        if self._shell is not None:
            self._shell.close()


def write_blueprint(directory: Path, name: str, engine: dict | None = None, ssh: dict | None = None,
                    **sections: dict) -> Path:
    """The sandbox blueprint renamed, with a router port of its own and sections updated."""
    doc = yaml.safe_load(SANDBOX_BLUEPRINT.read_text())
    doc["name"] = name
    doc["engine"].update({"router_port": free_port(), **(engine or {})})
    if ssh:
        doc["aws"]["ssh"] = ssh
    for key, values in sections.items():
        doc[key].update(values)
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


class Sites:
    """``make(gpus=8, sections={...}, **engine_overrides) -> Site`` with its nodes joined (``sections``
    updates other blueprint sections, e.g. ``kv_transfer``); ``cleanup`` removes all."""

    def __init__(self, sandbox, api, tmp_path_factory, nodes: NodeManager):
        self.sandbox, self.api, self.tmp, self.nodes = sandbox, api, tmp_path_factory, nodes
        self.sites: list[Site] = []

    def make(self, gpus: int = 8, sections: dict | None = None, **engine) -> Site:
        name = "dp" + uuid.uuid4().hex[:8]
        where = self.tmp.mktemp(name)
        ssh = {"user": self.nodes.login_user, "key_pair": "pdlift-sandbox", "key_file": str(self.nodes.key_file),
               "port": self.nodes.ssh_port, "connect_timeout_s": 3, "known_hosts": str(where / f"{name}.known_hosts")}
        path = write_blueprint(where, name, engine, ssh=ssh, **(sections or {}))
        site = Site(self.sandbox, self.api, path, load_blueprint(str(path)), self.nodes)
        self.sites.append(site)
        site.join_nodes(gpus)
        return site

    def cleanup(self) -> None:
        for site in self.sites:
            site.cleanup()


class SiteNodes(NodeManager):
    """The deploy tests' sandbox nodes, in the Kubernetes stand-in's state dir (so the engines find
    their node's EFA counters through the join records), on an address block of this session's."""

    def __init__(self, kube_sandbox):
        super().__init__(kube_sandbox.state_dir, address_base=f"127.{kube_sandbox.octet}.200.1",
                         ssh_port=free_port(), watch_faults=False)
        self.key_file = ensure_client_key(kube_sandbox.state_dir)


@pytest.fixture(scope="session")
def site_nodes(kube_sandbox):
    with SiteNodes(kube_sandbox) as nodes:
        yield nodes


@pytest.fixture
def make_site(kube_sandbox, kube_client, tmp_path_factory, site_nodes):
    """Sites for one test, removed (engines stopped, nodes terminated) when it ends."""
    sites = Sites(kube_sandbox, kube_client, tmp_path_factory, site_nodes)
    yield sites.make
    sites.cleanup()


@pytest.fixture(scope="module")
def make_module_site(kube_sandbox, kube_client, tmp_path_factory, site_nodes):
    """Sites shared by a module's tests, removed after its last test."""
    sites = Sites(kube_sandbox, kube_client, tmp_path_factory, site_nodes)
    yield sites.make
    sites.cleanup()


@pytest.fixture(scope="module")
def http():
    with EngineHttp(timeout_s=10) as h:
        yield h


@pytest.fixture
def engine_faults(kube_sandbox):
    """Write engine fault rules for the stand-in's engines (read at engine start); removed after."""
    path = kube_sandbox.state_dir / "sandbox" / "engines.json"
    before = path.read_text() if path.exists() else None

    def add(match: dict, faults: dict) -> None:
        doc = json.loads(path.read_text()) if path.exists() else {"rules": []}
        doc["rules"].append({"match": match, "faults": faults})
        path.write_text(json.dumps(doc))

    yield add
    if before is None:
        path.unlink(missing_ok=True)
    else:
        path.write_text(before)
