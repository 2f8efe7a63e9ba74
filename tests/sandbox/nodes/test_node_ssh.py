"""Each sandbox node is a real sshd on its own loopback address: key auth only, host keys pinned
from the EC2 console output, its own local NVMe."""

from __future__ import annotations

import socket
import subprocess

import paramiko
import pytest

from tests.sandbox.nodes.helpers import host_keys_from_console, pinned_client, run

pytestmark = pytest.mark.sandbox


def test_nodes_get_consecutive_loopback_addresses_from_the_base(cluster):
    assert [cluster.manager.node(i).address for i in ("i-0aaaa", "i-0bbbb")] == ["127.0.0.11", "127.0.0.12"]


def test_console_output_carries_the_host_keys_the_node_serves(cluster):
    keys = host_keys_from_console(cluster.manager.console_output("i-0aaaa"))
    assert {kind for kind, _ in keys} == {"ssh-ed25519", "ecdsa-sha2-nistp256"}
    client = cluster.connect("i-0aaaa", keys=keys)
    try:
        served = client.get_transport().get_remote_server_key()
        assert (served.get_name(), served.get_base64()) in keys
    finally:
        client.close()


def test_the_two_nodes_have_different_host_keys(cluster):
    a = host_keys_from_console(cluster.manager.console_output("i-0aaaa"))
    b = host_keys_from_console(cluster.manager.console_output("i-0bbbb"))
    assert not set(a) & set(b)


def test_a_host_key_that_was_not_pinned_is_rejected(cluster):
    node = cluster.manager.node("i-0aaaa")
    other_nodes_keys = host_keys_from_console(cluster.manager.console_output("i-0bbbb"))
    with pytest.raises(paramiko.SSHException):
        pinned_client(node.address, cluster.port, other_nodes_keys, node.login_user, cluster.key_file)


def test_a_key_other_than_the_sandbox_client_key_is_refused(cluster, tmp_path):
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    node = cluster.manager.node("i-0aaaa")
    keys = host_keys_from_console(cluster.manager.console_output("i-0aaaa"))
    with pytest.raises(paramiko.AuthenticationException):
        pinned_client(node.address, cluster.port, keys, node.login_user, stranger)


def test_sshd_listens_on_its_node_address_only(cluster):
    with socket.create_connection(("127.0.0.11", cluster.port), timeout=2):
        pass
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.250", cluster.port), timeout=2).close()


def test_a_session_runs_with_the_node_tools_first_on_path(cluster):
    code, out, _ = run(cluster.ssh("i-0aaaa"), "command -v nvidia-smi mpirun fi_pingpong; hostname")
    assert code == 0
    paths, hostname = out.splitlines()[:3], out.splitlines()[-1]
    assert all("/sandbox/nodes/i-0aaaa/bin/" in p for p in paths)
    if cluster.manager.namespaced:
        assert hostname == "ip-127-0-0-11"


def test_each_node_has_its_own_local_nvme(cluster):
    mount = cluster.manager.node("i-0aaaa").nvme_dir if not cluster.manager.namespaced else "/mnt/k8s-disks/0"
    code, _, err = run(cluster.ssh("i-0aaaa"), f"echo shard-a > {mount}/only-on-a")
    assert code == 0, err
    assert (cluster.manager.node("i-0aaaa").nvme_dir / "only-on-a").read_text() == "shard-a\n"
    if cluster.manager.namespaced:
        code, out, _ = run(cluster.ssh("i-0bbbb"), "ls -A /mnt/k8s-disks/0")
        assert code == 0 and "only-on-a" not in out
    assert not (cluster.manager.node("i-0bbbb").nvme_dir / "only-on-a").exists()
