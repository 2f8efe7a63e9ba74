"""Two sandbox GPU nodes (real sshd each) shared by this folder's tests, in a temporary state
dir on a free high port, and helpers to reach them over pinned SSH."""

from __future__ import annotations

import pytest

from sandbox.nodes.tools import faults
from tests.sandbox.nodes.helpers import USER_DATA, Cluster, boot_cluster, require_node_tools


@pytest.fixture(scope="session")
def cluster(tmp_path_factory) -> Cluster:
    require_node_tools()
    state_dir = tmp_path_factory.mktemp("node-state")
    manager, port = boot_cluster(state_dir, [
        ("i-0aaaa", USER_DATA, {"Name": "a"}, ["nn-1", "nn-2", "nn-3"]),
        ("i-0bbbb", None, {"Name": "b"}, ["nn-1", "nn-2", "nn-4"]),
    ])
    cluster = Cluster(manager, state_dir, port, state_dir / "ssh" / "id_ed25519")
    yield cluster
    for client in cluster.clients.values():
        client.close()
    manager.stop_all()


@pytest.fixture(autouse=True)
def no_faults_left(request):
    """Every test starts and ends with an empty fault file (and sshd back where it was)."""
    yield
    if "cluster" in request.fixturenames:
        cluster = request.getfixturevalue("cluster")
        faults.clear_faults(cluster.state_dir)
        cluster.manager.sync_faults()
