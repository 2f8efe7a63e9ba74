"""Node lifecycle: hung tools leave nothing behind, host keys rotate, terminate stops everything
of the node, and the join record follows the user data."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import paramiko
import pytest

from sandbox.nodes import NodeManager
from sandbox.nodes.records import TOOLS_DIR
from sandbox.nodes.sshd import alive
from sandbox.nodes.tools import faults
from tests.fixtures.strict import missing
from tests.sandbox.nodes.helpers import (
    USER_DATA,
    Cluster,
    boot_cluster,
    host_keys_from_console,
    require_node_tools,
    run,
    wait_until,
)

pytestmark = pytest.mark.sandbox


@pytest.fixture
def fresh(tmp_path):
    """A cluster of its own for tests that break or end nodes."""
    require_node_tools()
    manager, port = boot_cluster(tmp_path, [("i-0cccc", USER_DATA, {}, ["nn-1", "nn-2", "nn-5"])])
    cluster = Cluster(manager, tmp_path, port, tmp_path / "ssh" / "id_ed25519")
    yield cluster
    for client in cluster.clients.values():
        client.close()
    manager.stop_all()


def commands(cluster: Cluster, instance_id: str) -> dict[int, str]:
    out = {}
    for pid in cluster.manager.processes(instance_id):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                out[pid] = fh.read().replace(b"\0", b" ").decode()
        except OSError:
            continue
    return out


def running(cluster: Cluster, instance_id: str, needle: str) -> list[int]:
    return [pid for pid, cmd in commands(cluster, instance_id).items() if needle in cmd]


def test_closing_the_ssh_channel_ends_a_hung_nccl_test(cluster):
    cluster.set_faults("i-0aaaa", hang=True)
    _, out, _ = cluster.ssh("i-0aaaa").exec_command("all_reduce_perf -b 1M -e 1M -g 8")
    assert wait_until(lambda: running(cluster, "i-0aaaa", "nccl_tests.py")), "the hung test never started"
    out.channel.close()
    assert wait_until(lambda: not running(cluster, "i-0aaaa", "nccl_tests.py")), commands(cluster, "i-0aaaa")


def test_a_hung_mpirun_is_stopped_by_timeout_and_leaves_nothing(cluster):
    cluster.set_faults("127.0.0.12", hang=["all_reduce_perf"])
    code, out, _ = run(cluster.ssh("i-0aaaa"), "timeout 5 mpirun -np 2 --host 127.0.0.11,127.0.0.12 all_reduce_perf -g 8")
    assert code == 124 and "#wrong" in out  # the header came out, then it hung
    assert wait_until(lambda: not running(cluster, "i-0aaaa", "mpirun.py"))


def test_a_hung_fi_pingpong_is_stopped_by_timeout(cluster):
    cluster.set_faults("i-0aaaa", hang=["fi_pingpong"])
    code, _, _ = run(cluster.ssh("i-0aaaa"), "timeout 1 fi_pingpong -e rdm -p efa -I 5 127.0.0.12")
    assert code == 124
    assert wait_until(lambda: not running(cluster, "i-0aaaa", "fi_pingpong"))


def test_nccl_tests_own_timeout_reports_a_test_timeout(cluster):
    cluster.set_faults("*", hang=True)
    code, out, _ = run(cluster.ssh("i-0bbbb"), "all_reduce_perf -b 1M -e 1M -g 8 -T 1")
    assert code == 1 and "ip-127-0-0-12: Test timeout (1s)" in out


def test_a_rotated_host_key_is_refused_with_the_old_pin(fresh):
    old = host_keys_from_console(fresh.manager.console_output("i-0cccc"))
    pid = fresh.manager.sshd_pid("i-0cccc")
    fresh.manager.rotate_host_key("i-0cccc")
    with pytest.raises(paramiko.BadHostKeyException):
        fresh.connect("i-0cccc", keys=old)
    assert run(fresh.connect("i-0cccc"), "true")[0] == 0  # the console output carries the new keys
    assert fresh.manager.sshd_pid("i-0cccc") == pid and alive(pid)


def test_the_host_key_change_fault_rotates_the_key(fresh):
    old = host_keys_from_console(fresh.manager.console_output("i-0cccc"))
    fresh.set_faults("i-0cccc", host_key_change=1)

    def refused() -> bool:
        try:
            fresh.connect("i-0cccc", keys=old).close()
        except paramiko.BadHostKeyException:
            return True
        return False

    assert wait_until(refused, timeout=10, interval=0.2)


def test_terminate_stops_sshd_and_every_process_of_the_node(fresh):
    code, _, _ = run(fresh.ssh("i-0cccc"), "setsid nohup sleep 300 >/dev/null 2>&1 < /dev/null &")
    sleepers = wait_until(lambda: running(fresh, "i-0cccc", "sleep 300"))
    sshd_pid = fresh.manager.sshd_pid("i-0cccc")
    assert code == 0 and sleepers and alive(sshd_pid)
    join = fresh.state_dir / "sandbox" / "joins" / "i-0cccc.json"
    assert join.exists()
    fresh.manager.terminate("i-0cccc")
    assert not alive(sshd_pid) and not any(alive(p) for p in sleepers)
    assert not join.exists()


def test_a_freed_address_is_given_to_the_next_node(fresh):
    address = fresh.manager.node("i-0cccc").address
    second = fresh.manager.boot("i-0dddd", None, {}, [])
    assert second.address != address
    fresh.manager.terminate("i-0cccc")
    assert fresh.manager.boot("i-0eeee", None, {}, []).address == address


def test_stop_all_leaves_no_sshd_running(fresh):
    pids = [fresh.manager.sshd_pid("i-0cccc"), fresh.manager.sshd_pid(fresh.manager.boot("i-0dddd").instance_id)]
    fresh.manager.stop_all()
    assert not any(alive(p) for p in pids)


def test_a_new_manager_stops_the_nodes_a_crashed_one_left_running(fresh):
    sshd_pid = fresh.manager.sshd_pid("i-0cccc")
    successor = NodeManager(fresh.state_dir, ssh_port=fresh.port, watch_faults=False)  # same state dir
    try:
        assert not alive(sshd_pid)
        assert not (fresh.state_dir / "sandbox" / "joins" / "i-0cccc.json").exists()
        assert successor.boot("i-0dddd").address == "127.0.0.11"  # the address is free again
    finally:
        successor.stop_all()


def test_the_join_record_follows_the_user_data_and_topology(cluster):
    record = json.loads((cluster.state_dir / "sandbox" / "joins" / "i-0aaaa.json").read_text())
    assert record["name"] == record["labels"]["kubernetes.io/hostname"] == "ip-127-0-0-11.us-east-2.compute.internal"
    assert record["address"] == "127.0.0.11" and record["instance_id"] == "i-0aaaa"
    assert record["labels"]["pdlift.io/role"] == "prefill"
    assert record["labels"]["pdlift.io/deployment"] == "sandbox-2p2d"
    assert record["labels"]["node.kubernetes.io/instance-type"] == "p5en.48xlarge"
    assert [record["labels"][f"topology.k8s.aws/network-node-layer-{i}"] for i in (1, 2, 3)] == ["nn-1", "nn-2", "nn-3"]
    assert record["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    assert record["allocatable"]["nvidia.com/gpu"] == "8" and record["allocatable"]["vpc.amazonaws.com/efa"] == "16"
    assert record["allocatable"]["pods"] == "200" and record["allocatable"]["hugepages-2Mi"]


def test_a_node_without_a_nodeconfig_does_not_join(cluster):
    assert not (cluster.state_dir / "sandbox" / "joins" / "i-0bbbb.json").exists()
    assert not cluster.manager.node("i-0bbbb").joined


def test_a_never_join_fault_keeps_the_join_record_away(fresh):
    faults.set_node_faults(fresh.state_dir, "i-0ffff", never_join=True)
    node = fresh.manager.boot("i-0ffff", USER_DATA, {}, [])
    assert not node.joined and not (fresh.state_dir / "sandbox" / "joins" / "i-0ffff.json").exists()
    assert "never_join" in fresh.manager.console_output("i-0ffff")


def test_a_small_nvme_fault_is_a_disk_that_really_fills_up(fresh):
    if shutil.which("unshare") is None:
        missing("the size-limited NVMe needs util-linux's unshare (scripts/setup installs it)")
    if not fresh.manager.namespaced:
        # A plain skip: unshare is there but the kernel or the container refuses a private mount
        # namespace (not root, no CAP_SYS_ADMIN); no setup step can grant that.
        pytest.skip("the size-limited NVMe needs a private mount namespace (root)")
    faults.set_node_faults(fresh.state_dir, "i-0ffff", nvme_size_mb=4)
    fresh.manager.boot("i-0ffff", None, {}, [])
    client = fresh.ssh("i-0ffff")
    code, out, _ = run(client, "python3 -c \"import os; s=os.statvfs('/mnt/k8s-disks/0'); print(s.f_blocks*s.f_frsize)\"")
    assert code == 0 and int(out) == 4 << 20
    code, _, err = run(client, "dd if=/dev/zero of=/mnt/k8s-disks/0/big bs=1M count=8")
    assert code != 0 and "No space left on device" in err


def test_tools_refuse_to_run_outside_a_node():
    env = {k: v for k, v in os.environ.items() if k != "PDLIFT_SANDBOX_NODE_DIR"}

    res = subprocess.run(["python3", str(TOOLS_DIR / "nvidia_smi.py")], env=env, capture_output=True, text=True, timeout=30)
    assert res.returncode == 2 and "not on a sandbox node" in res.stderr and "Traceback" not in res.stderr
