"""The fabric layers' commands: exact argument lists, pinning, timeouts, and the two node-side
scripts, whose positional parameters must reach the tools as literal words."""

from __future__ import annotations

import contextlib
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from blueprints.schema import FabricSpec
from tasks.planning.fabric import commands as fc
from sandbox.s3 import free_port as _free_port

SPEC = FabricSpec(test_timeout_s=40, judge_size_bytes=1 << 30)


def _opt(argv, flag: str) -> str:
    return argv[list(argv).index(flag) + 1]


def _loopback_parts(cmd: fc.Command) -> tuple[list[str], list[str]]:
    argv = list(cmd.argv)
    n = int(argv[7])
    return argv[8:8 + n], argv[8 + n:]


def test_inventory_asks_nvidia_smi_for_csv_and_fi_info_for_efa_rdm_endpoints():
    assert fc.gpu_inventory().argv == ("nvidia-smi", f"--query-gpu={fc.GPU_QUERY}", "--format=csv")
    assert fc.efa_inventory().argv == ("fi_info", "-p", "efa", "-t", "FI_EP_RDM")


def test_a_loopback_pins_server_and_client_to_one_device_without_shm_on_distinct_ports():
    cmd = fc.loopback("rdmap79s0", 23000, SPEC, "10.0.0.7")
    server, client = _loopback_parts(cmd)
    assert cmd.env["FI_EFA_ENABLE_SHM_TRANSFER"] == "0" and cmd.env["FI_EFA_IFACE"] == "rdmap79s0"
    for argv in (server, client):
        assert argv[:5] == ["fi_pingpong", "-e", "rdm", "-p", "efa"] and _opt(argv, "-d") == "rdmap79s0-rdm"
    assert _opt(server, "-B") == "23000" and "-P" not in server
    assert (_opt(client, "-P"), client[-1]) == ("23000", "localhost") and "-B" not in client
    assert cmd.argv[4] == "59D8"  # 23000 as the kernel's socket table prints it


def test_the_negative_control_is_the_same_loopback_pinned_to_a_device_that_does_not_exist():
    cmd = fc.negative_control(23002, SPEC, "10.0.0.7")
    server, client = _loopback_parts(cmd)
    assert cmd.env["FI_EFA_IFACE"] == fc.ABSENT_DEVICE
    assert _opt(server, "-d") == _opt(client, "-d") == f"{fc.ABSENT_DEVICE}-rdm"


def test_a_pair_pingpong_client_names_the_server_and_its_port():
    server, client = fc.pingpong_server(24000, SPEC, "10.0.0.7"), fc.pingpong_client("10.0.0.7", 24000, SPEC)
    assert server.argv[:2] == ("sh", "-c") and _opt(server.argv, "-B") == "24000"
    assert client.argv[-1] == "10.0.0.7" and _opt(client.argv, "-P") == "24000" and "-d" not in client.argv
    assert client.timeout_s == SPEC.test_timeout_s and server.timeout_s > 2 * SPEC.test_timeout_s


def test_single_node_all_reduce_sweeps_only_large_sizes_with_checking_watchdog_and_json():
    cmd = fc.single_node_all_reduce(SPEC, "out.json")
    argv = cmd.argv
    assert argv[0] == "all_reduce_perf"
    assert (_opt(argv, "-b"), _opt(argv, "-e"), _opt(argv, "-f")) == (str(1 << 30), str(16 << 30), "2")
    assert (_opt(argv, "-g"), _opt(argv, "-c"), _opt(argv, "-T"), _opt(argv, "-J")) == ("8", "1", "40", "out.json")
    assert cmd.timeout_s > SPEC.test_timeout_s  # its own -T watchdog reports first


@pytest.mark.parametrize("collective", ["all_reduce", "alltoall", "sendrecv"])
def test_a_pair_test_runs_eight_ranks_per_node_over_efa_with_nccl_info_logging(collective):
    argv = fc.across_nodes(collective, ["10.0.0.1", "10.0.0.2"], SPEC, "p.json").argv
    assert argv[0] == "mpirun" and _opt(argv, "--host") == "10.0.0.1:8,10.0.0.2:8"
    assert (_opt(argv, "-np"), _opt(argv, "-N")) == ("16", "8")
    exported = [argv[i + 1] for i, a in enumerate(argv) if a == "-x"]
    assert "FI_PROVIDER=efa" in exported and "NCCL_DEBUG=INFO" in exported
    program = argv[argv.index(fc.NCCL_BINARIES[collective]):]
    assert _opt(program, "-g") == "1" and _opt(program, "-c") == "1" and _opt(program, "-J") == "p.json"


def test_the_whole_set_runs_one_rank_per_gpu_on_every_node():
    argv = fc.across_nodes("alltoall", ["a", "b", "c", "d"], SPEC, "s.json").argv
    assert _opt(argv, "-np") == "32" and _opt(argv, "--host") == "a:8,b:8,c:8,d:8"


def test_scratch_paths_stay_inside_the_scratch_folder_whatever_the_run_or_test_id():
    path = fc.json_path("../../etc;rm -rf /", "pair-p1-i-1<->i-2-all_reduce/../x")
    assert path.startswith(".pdlift/fabric/") and ".." not in path.split("/") and len(path.split("/")) == 4
    assert " " not in path and ";" not in path


def test_control_ports_wrap_inside_their_range_and_never_hit_fi_pingpongs_default():
    ports = {fc.port_at(31990, n) for n in range(100)}
    assert all(fc.PORT_LOW <= p < fc.PORT_LOW + fc.PORT_SPAN for p in ports) and len(ports) == 100
    assert all(p < 32768 for p in {fc.port_at(b, n) for b in (20000, 31999, 45000) for n in range(30000)})


PS = """    1 sshd: /usr/sbin/sshd -D -f /x/sshd_config [listener]
  120 sh -c m=$1; shift
  131 python3 -B /repo/sandbox/nodes/tools/nccl_tests.py all_reduce_perf -b 1073741824 -T 3
  140 /opt/nccl-tests/build/alltoall_perf -b 8 -e 16G
  150 python3 -B /repo/sandbox/nodes/tools/fi_pingpong.py -e rdm -p efa -B 23001 -I 10
  151 /usr/bin/fi_pingpong -p tcp -d lo -e rdm -B 23001 -I 10
  160 /usr/bin/fi_pingpong -p tcp -d lo -e rdm -B 230011 -I 10
  170 vim notes-about-mpirun.txt
  180 ps -eo pid=,args=
"""


def test_leftover_processes_are_our_tools_real_or_wrapped_and_nothing_else():
    assert [pid for pid, _ in fc.leftover_processes(PS)] == [131, 140, 150, 151, 160]


def test_the_server_on_a_port_is_found_by_its_exact_port():
    assert fc.serving_on(PS, 23001) == [150, 151]


def test_libfabric_versions_are_read_from_fi_info_version():
    assert fc.parse_versions("fi_info: 1.22.0amzn4.0\nlibfabric: 1.22.0amzn4.0\nlibfabric api: 1.22\n") == {
        "libfabric": "1.22.0amzn4.0", "libfabric api": "1.22"}


def test_every_command_is_an_argument_list_of_strings():
    cmds = [fc.gpu_inventory(), fc.efa_inventory(), fc.libfabric_version(), fc.loopback("d", 1, SPEC, "10.0.0.7"),
            fc.pingpong_server(3, SPEC, "10.0.0.7"), fc.pingpong_client("h", 3, SPEC), fc.make_scratch("r"),
            fc.single_node_all_reduce(SPEC, "j"), fc.across_nodes("sendrecv", ["a", "b"], SPEC, "j"),
            fc.fetch_and_remove("j"), fc.list_processes(), fc.kill_processes([5, 6])]
    for cmd in cmds:
        assert isinstance(cmd.argv, tuple) and all(isinstance(a, str) for a in cmd.argv)
        assert shlex.split(cmd.shown)[-len(cmd.argv):] == list(cmd.argv)


# --- the node-side scripts, run here with sh and stand-in programs ----------------------------------

# A stand-in server: listens on argv[1] (the port) at argv[3] (default 127.0.0.1) for argv[2] s.
LISTEN = ("import socket, sys, time; s = socket.socket(); "
          "s.bind((sys.argv[3] if len(sys.argv) > 3 else '127.0.0.1', int(sys.argv[1]))); "
          "s.listen(); print('served', flush=True); time.sleep(float(sys.argv[2]))")
ECHO = "import sys; print('client argv:', sys.argv[1:])"
NEVER = [sys.executable, "-c", "import time; time.sleep(30)"]


def _loopback(server: list[str], client: list[str], port: int, wait_s: int = 5,
              node: str = "127.0.0.1") -> subprocess.CompletedProcess:
    argv = ["sh", "-c", fc.LOOPBACK_SCRIPT, "pdlift-loopback", f"{port:04X}", fc.listen_addresses(node), str(wait_s),
            str(len(server)), *server, *client]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30)


def _serve(server: list[str], port: int, wait_s: int, node: str = "127.0.0.1") -> subprocess.CompletedProcess:
    argv = ["sh", "-c", fc.SERVE_SCRIPT, "pdlift-serve", f"{port:04X}", fc.listen_addresses(node), str(wait_s),
            *server]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30)


@contextlib.contextmanager
def _another_node_listening(address: str, port: int):
    """Another node's server on the same control port (sandbox nodes share one kernel, so its
    socket is in the same /proc/net/tcp)."""
    decoy = subprocess.Popen([sys.executable, "-c", LISTEN, str(port), "30", address], stdout=subprocess.PIPE,
                             text=True)
    try:
        assert decoy.stdout.readline().strip() == "served"
        yield
    finally:
        decoy.kill()
        decoy.wait()


def test_the_loopback_script_starts_the_client_once_the_server_listens_and_passes_words_literally(tmp_path):
    witness = tmp_path / "ran"
    hostile = [f"; touch {witness}", f"$(touch {witness})", f"`touch {witness}`", "'\"", "$IFS", "a b"]
    port = _free_port()
    done = _loopback([sys.executable, "-c", LISTEN, str(port), "2"], [sys.executable, "-c", ECHO, *hostile], port)
    assert done.returncode == 0, done.stdout + done.stderr
    client, _, server = done.stdout.partition("Server Log:")
    assert client.startswith("Client Log:") and f"client argv: {hostile!r}" in client
    assert "served" in server and not witness.exists()


def test_the_loopback_script_reports_a_server_that_exits_before_listening():
    done = _loopback([sys.executable, "-c", "import sys; print('fi_getinfo failed'); sys.exit(61)"],
                     [sys.executable, "-c", ECHO], _free_port())
    assert done.returncode == 61
    assert "server exited before listening" in done.stdout and "client argv" not in done.stdout


def test_the_loopback_script_kills_a_server_that_never_listens_within_its_wait():
    done = _loopback(NEVER, [sys.executable, "-c", ECHO], _free_port(), wait_s=1)
    assert fc.NEVER_LISTENED in done.stdout and done.returncode == 137


def test_the_fetch_script_prints_then_removes_the_file_and_fails_when_it_is_missing(tmp_path):
    target = tmp_path / "r.json"
    target.write_text('{"ok": 1}')
    out = subprocess.run(list(fc.fetch_and_remove(str(target)).argv), capture_output=True, text=True, timeout=10)
    assert out.stdout == '{"ok": 1}' and out.returncode == 0 and not Path(target).exists()
    again = subprocess.run(list(fc.fetch_and_remove(str(target)).argv), capture_output=True, text=True, timeout=10)
    assert again.returncode != 0


def test_the_serve_script_announces_when_its_server_listens_and_gives_up_on_one_that_never_does():
    port = _free_port()
    done = _serve([sys.executable, "-c", LISTEN, str(port), "2"], port, 5)
    assert done.returncode == 0 and done.stderr.startswith(f"{fc.LISTENING_MARKER} {port:04X}")
    done = _serve(NEVER, port, 1)
    assert done.returncode == 137 and fc.NEVER_LISTENED in done.stderr


def test_the_serve_script_does_not_take_another_nodes_listener_on_its_port_for_its_own():
    port = _free_port()
    with _another_node_listening("127.0.0.2", port):
        done = _serve(NEVER, port, 1, node="127.0.0.3")
        assert fc.LISTENING_MARKER not in done.stderr and fc.NEVER_LISTENED in done.stderr
        ours = _serve([sys.executable, "-c", LISTEN, str(port), "1", "127.0.0.3"], port, 5, node="127.0.0.3")
        assert ours.returncode == 0 and ours.stderr.startswith(f"{fc.LISTENING_MARKER} {port:04X}")


def test_the_loopback_script_starts_no_client_on_another_nodes_listener():
    port = _free_port()
    with _another_node_listening("127.0.0.2", port):
        done = _loopback(NEVER, [sys.executable, "-c", ECHO], port, wait_s=1, node="127.0.0.3")
    assert "client argv" not in done.stdout and fc.NEVER_LISTENED in done.stdout


def test_the_loopback_starts_no_client_on_another_programs_listener_on_127_0_0_1():
    """The client names "localhost", but the server listens on the node's address: a listener on
    127.0.0.1 and the same port is someone else's (it released the client early, then refused)."""
    port = _free_port()
    listen = fc.loopback("rdmap79s0", port, SPEC, "127.0.0.3").argv[5]
    argv = ["sh", "-c", fc.LOOPBACK_SCRIPT, "pdlift-loopback", f"{port:04X}", listen, "1",
            str(len(NEVER)), *NEVER, sys.executable, "-c", ECHO]
    with _another_node_listening("127.0.0.1", port):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert "client argv" not in done.stdout and fc.NEVER_LISTENED in done.stdout


def test_a_servers_own_addresses_are_the_wildcard_and_the_nodes_in_the_kernels_notation():
    words = fc.listen_addresses("10.1.2.3").split("|")
    assert words == ["00000000", "0" * 32, "0302010A", "0000000000000000FFFF00000302010A"]
    assert "0100007F" in fc.listen_addresses("10.1.2.3", "127.0.0.1").split("|")
