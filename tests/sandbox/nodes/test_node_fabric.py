"""A real libfabric fi_pingpong runs between two sandbox nodes over SSH (the tcp provider stands
in for efa), pinned to one EFA device, with a negative control that must fail."""

from __future__ import annotations

import re
import pytest

from tests.sandbox.nodes.helpers import free_port, listening, run, wait_until

pytestmark = pytest.mark.sandbox

ROW = re.compile(r"^(\S+)\s+(\d+k?)\s+([=+]\S+)\s+(\S+)\s+([\d.]+)s\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$")
ENV = "FI_EFA_ENABLE_SHM_TRANSFER=0 FI_LOG_LEVEL=warn"
# How long a fi_pingpong of well under a second may take before it counts as hung. These tests run
# in scripts/test's other lane, which gets only the CPU the measured lane leaves: a pingpong of 0.7 s
# alone took 24 s beside four busy sessions at normal priority, and one ran past a 20 s bound in CI.
GUARD_S = 90


def pingpong(cluster, server_id: str, client_id: str, server_env: str = "", client_env: str = "", extra: str = ""):
    """Server in the background on one node, client on another (or the same); both results."""
    target = cluster.manager.node(server_id).address
    port = free_port([target])
    _, sout, serr = cluster.ssh(server_id).exec_command(
        f"{ENV} {server_env} timeout {GUARD_S} fi_pingpong -e rdm -p efa -B {port} -I 10 {extra}",
        timeout=GUARD_S + 10)
    assert wait_until(lambda: listening(target, port), timeout=GUARD_S), serr.channel.recv_stderr(4096)
    client = run(cluster.ssh(client_id), f"{ENV} {client_env} timeout {GUARD_S} fi_pingpong -e rdm -p efa -P {port} "
                                         f"-I 10 {extra} {target}", timeout=GUARD_S + 10)
    sout.channel.settimeout(GUARD_S + 10)
    server = (sout.channel.recv_exit_status(), sout.read().decode(), serr.read().decode())
    return server, client


def test_a_real_fi_pingpong_runs_between_two_nodes(cluster):
    server, client = pingpong(cluster, "i-0aaaa", "i-0bbbb")
    assert client[0] == 0 and server[0] == 0, (client, server)
    header, *rows = client[1].splitlines()
    assert header.split() == ["bytes", "#sent", "#ack", "total", "time", "MB/sec", "usec/xfer", "Mxfers/sec"]
    parsed = [ROW.match(r) for r in rows]
    assert parsed and all(parsed), rows
    assert all(m.group(3) == "=10" for m in parsed)  # every message acknowledged
    assert [m.group(1) for m in parsed][:2] == ["64", "256"]


def test_pingpong_pinned_to_a_real_efa_device_passes(cluster):
    server, client = pingpong(cluster, "i-0aaaa", "i-0aaaa", "FI_EFA_IFACE=rdmap79s0", "FI_EFA_IFACE=rdmap79s0", "-S 64")
    assert (server[0], client[0]) == (0, 0), (server, client)


def test_the_negative_control_with_a_nonexistent_device_fails(cluster):
    code, out, err = run(cluster.ssh("i-0aaaa"), f"{ENV} FI_EFA_IFACE=rdmap999s0 timeout {GUARD_S} fi_pingpong -e rdm -p efa "
                                                 f"-B {free_port(['127.0.0.11'])} -I 5", timeout=GUARD_S + 10)
    assert code not in (0, 124) and "fi_getinfo" in err and out == ""


def test_a_domain_named_with_d_must_be_one_of_the_nodes_devices(cluster):
    code, _, err = run(cluster.ssh("i-0aaaa"), f"timeout {GUARD_S} fi_pingpong -e rdm -p efa -d efa_99-rdm 127.0.0.12",
                         timeout=GUARD_S + 10)
    assert code not in (0, 124) and "No data available" in err


def test_the_sixteenth_device_is_gone_with_fifteen_efa_devices(cluster):
    cluster.set_faults("i-0aaaa", efa_devices=15)
    devices = [l.split()[1][:-4] for l in run(cluster.ssh("i-0bbbb"), "fi_info -p efa -t FI_EP_RDM")[1].splitlines()
               if "domain:" in l]
    code, _, err = run(cluster.ssh("i-0aaaa"), f"FI_EFA_IFACE={devices[-1]} timeout {GUARD_S} fi_pingpong -e rdm -p efa "
                                               f"-B {free_port(['127.0.0.11'])} -I 5", timeout=GUARD_S + 10)
    assert code not in (0, 124) and "fi_getinfo" in err


def test_a_client_cannot_reach_an_unreachable_node(cluster):
    cluster.set_faults("i-0bbbb", unreachable=True)
    cluster.manager.sync_faults()
    code, _, err = run(cluster.ssh("i-0aaaa"), f"timeout {GUARD_S} fi_pingpong -e rdm -p efa -I 5 127.0.0.12",
                         timeout=GUARD_S + 10)
    assert code not in (0, 124) and "Connection refused" in err


def test_a_slow_link_shows_in_the_pingpong_timings(cluster):
    cluster.set_faults("i-0bbbb", slow_link=50)
    server, client = pingpong(cluster, "i-0aaaa", "i-0bbbb", extra="-S 256")
    assert client[0] == 0, client
    usec = float(ROW.match(client[1].splitlines()[1]).group(7))
    healthy = float(ROW.match(server[1].splitlines()[1]).group(7))
    assert usec > 10 * healthy


def test_a_client_never_connects_outside_loopback(cluster):
    code, _, err = run(cluster.ssh("i-0aaaa"), f"timeout {GUARD_S} fi_pingpong -e rdm -p efa -I 5 10.1.2.3",
                         timeout=GUARD_S + 10)
    assert code not in (0, 124) and "Connection refused" in err


def test_the_fi_pingpong_shim_hides_the_kernel_symbol_table_and_nothing_else(tmp_path):
    """libfabric 1.17 reads all of /proc/kallsyms on every fi_getinfo (its dma-buf probe); the
    shim the sandbox preloads into fi_pingpong makes that one fopen fail (sandbox/nodes/bindshim.c)."""
    import subprocess
    import sys

    from sandbox.nodes.records import build_shim

    shim = build_shim(tmp_path)
    if shim is None:
        pytest.skip("no C compiler")
    probe = ("import ctypes; libc = ctypes.CDLL(None, use_errno=True); libc.fopen.restype = ctypes.c_void_p; "
             "print(libc.fopen(b'/proc/kallsyms', b'r') is None, ctypes.get_errno(), "
             "libc.fopen(b'/proc/version', b'r') is not None)")
    out = subprocess.run([sys.executable, "-c", probe], env={"LD_PRELOAD": str(shim)}, capture_output=True,
                         text=True, timeout=30, check=True)
    assert out.stdout.split() == ["True", "2", "True"]  # ENOENT for the symbol table, other files open
    plain = subprocess.run([sys.executable, "-c", probe], env={}, capture_output=True, text=True, timeout=30,
                           check=True)
    assert plain.stdout.split()[0] == "False"  # without the shim the table opens (the probe can tell)
