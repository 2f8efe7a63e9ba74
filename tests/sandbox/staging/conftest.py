"""Fixtures for the weight staging tests: the sandbox S3 (tests/fixtures/sandbox.py), sandbox GPU
nodes (sandbox.nodes.NodeManager: one sshd each, its own NVMe at /mnt/k8s-disks/0), a
misbehaving S3 proxy in front of the sandbox S3, and its environment for the orchestrator."""

from __future__ import annotations

import shutil

import pytest

from tests.fixtures.strict import missing
from tests.sandbox.staging.s3proxy import S3Proxy
from tests.fixtures import loopback
from tests.sandbox.staging.sshd import free_port
from tests.sandbox.staging.support import NODES, SMALL_NODE, Nodes


@pytest.fixture(scope="session")
def staging_nodes(tmp_path_factory):
    from sandbox.nodes import sshd as node_sshd
    from sandbox.nodes.manager import NodeManager
    from sandbox.nodes.tools import faults

    if shutil.which("unshare") is None:
        missing("sandbox nodes need util-linux's unshare (scripts/setup installs it)")
    if not node_sshd.namespaces_supported():
        # A plain skip: unshare is there but the kernel or the container (no CAP_SYS_ADMIN, no
        # unprivileged user namespaces) refuses mount namespaces; no setup step can grant that.
        pytest.skip("sandbox nodes need mount namespaces for their own NVMe")
    state = tmp_path_factory.mktemp("staging-nodes")
    faults.fault_file(state).parent.mkdir(parents=True, exist_ok=True)
    faults.fault_file(state).write_text(f'{{"{SMALL_NODE}": {{"nvme_size_mb": 16}}}}')
    port = free_port()
    manager = NodeManager(state, address_base=loopback.node_base(41), ssh_port=port,
                          watch_faults=False)
    try:
        booted = [manager.boot(i) for i in NODES + [SMALL_NODE]]
        yield Nodes(manager, state / "ssh" / "id_ed25519", port, booted[0].login_user)
    finally:
        manager.stop_all()


@pytest.fixture
def s3_proxy(s3_sandbox):
    proxy = S3Proxy(s3_sandbox.endpoint).start()
    yield proxy
    proxy.stop()


@pytest.fixture
def s3_env(s3_sandbox, monkeypatch):
    """The orchestrator's environment for the sandbox S3 (what `scripts/sandbox up` exports)."""
    for name, value in s3_sandbox.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    return s3_sandbox.env()
