#!/usr/bin/env python3
"""Sandbox `fi_pingpong`: a thin wrapper over the real libfabric /usr/bin/fi_pingpong.

`-p efa` (or FI_PROVIDER=efa) is emulated by a real provider on loopback: `-e rdm` -> the tcp
provider (`tcp;ofi_rxm`), `-e dgram` (fi_pingpong's default) -> the udp provider, both pinned to
`-d lo`; `-e msg` fails as it does on EFA. Every other option (-B -P -I -S -c -m -v and the server
address) is passed through, so the table on stdout and the exit status are the real binary's.
The control socket binds the node's own 127.0.0.x address through an LD_PRELOAD shim
(sandbox/nodes/bindshim.c), so two nodes' servers never collide and nothing binds 0.0.0.0.

NIC pinning is checked here, where libfabric's efa provider would: `-d rdmapNs0-rdm` and
FI_EFA_IFACE=rdmapNs0[,..] must name the node's EFA devices (an `efa_devices` fault removes some);
anything else fails with fi_getinfo's -61 (No data available), which is the negative control.
Faults: `hang` blocks until killed; `unreachable` on the server's node refuses the connection;
`slow_link` on either end scales the timings by the factor (and really waits the extra time).
"""

from __future__ import annotations

import ctypes
import getopt
import ipaddress
import os
import signal
import subprocess
import sys
import time

import faults as fault_file
import toolkit

REAL = os.environ.get("PDLIFT_SANDBOX_REAL_FI_PINGPONG", "/usr/bin/fi_pingpong")
OPTSTRING = "hvd:p:e:I:S:B:P:cm:6"
PASS_THROUGH = {"-I", "-S", "-B", "-P", "-c", "-m", "-v", "-h"}
ENODATA, ECONNREFUSED = 61, 111
MAX_EXTRA_WAIT_S = float(os.environ.get("PDLIFT_SANDBOX_SLOW_WAIT_MAX_S", "1"))


def getinfo_failure() -> int:
    print(f"[error] util/pingpong.c:1258: fi_getinfo(): ret=-{ENODATA} (No data available)", file=sys.stderr)
    return ENODATA


def refused() -> int:
    print("[error] util/pingpong.c:408 : failed to connect: Connection refused", file=sys.stderr)
    return ECONNREFUSED


def nic_names_ok(node: toolkit.Node, faults: dict, ep: str, domain: str | None) -> bool:
    devices = node.efa_domains(faults)
    if not devices:
        return False
    wanted: list[str] = []
    if domain is not None:
        base, _, kind = domain.rpartition("-")
        if kind not in ("rdm", "dgram") or kind != ep:
            return False
        wanted.append(base)
    iface = os.environ.get("FI_EFA_IFACE", "all").strip()
    if iface and iface != "all":
        wanted.extend(name.strip() for name in iface.split(","))
    return all(name in devices for name in wanted)


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def real_env(node: toolkit.Node) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("FI_PROVIDER", None)  # it would filter out the tcp/udp provider that stands in for efa
    # libfabric 1.17's tcp provider ignores `-d lo` and binds its data endpoint to the first
    # interface's address; these keep the data path on loopback.
    env["FI_TCP_IFACE"] = env["FI_UDP_IFACE"] = "lo"
    shim = node.record.get("bind_shim")
    if shim and os.path.exists(shim):
        env["LD_PRELOAD"] = shim
        env["PDLIFT_SANDBOX_BIND_ADDR"] = node.address
    return env


def _die_with_parent() -> None:
    try:
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: no orphan child
    except OSError:
        pass


def run_scaled(argv: list[str], env: dict[str, str], factor: float) -> int:
    """Run the real binary and report its table `factor` times slower, waiting the difference."""
    child = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True, preexec_fn=_die_with_parent)

    def _forward(signum, _frame):
        child.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, _forward)
    extra = 0.0
    assert child.stdout is not None
    for line in child.stdout:
        parts = line.split()
        if len(parts) == 8 and parts[4].endswith("s") and parts[0] != "bytes":
            try:
                secs, mbps, usec, mxfers = float(parts[4][:-1]), float(parts[5]), float(parts[6]), float(parts[7])
            except ValueError:
                secs = None
            if secs is not None:
                extra += secs * (factor - 1)
                line = (
                    f"{parts[0]:<8}{parts[1]:<8}{parts[2]:<9}{parts[3]:<8}{secs * factor:8.2f}s"
                    f"{mbps / factor:10.2f}{usec * factor:11.2f}{mxfers / factor:11.2f}\n"
                )
        sys.stdout.write(line)
        sys.stdout.flush()
    code = child.wait()
    time.sleep(min(extra, MAX_EXTRA_WAIT_S))
    return code


def main(argv: list[str]) -> int:
    node = toolkit.this_node()
    try:
        opts, args = getopt.getopt(argv, OPTSTRING)
    except getopt.GetoptError as exc:
        print(f"fi_pingpong: {exc}", file=sys.stderr)
        return 1
    given = dict(opts)
    provider = given.get("-p", os.environ.get("FI_PROVIDER"))
    env = real_env(node)
    if provider != "efa":
        os.execve(REAL, [REAL, *argv], env)
    faults = node.faults()
    if fault_file.hangs(faults, "fi_pingpong"):
        toolkit.hang_until_killed()
    ep = given.get("-e", "dgram")
    if ep not in ("rdm", "dgram") or not nic_names_ok(node, faults, ep, given.get("-d")):
        return getinfo_failure()
    factor = float(faults.get("slow_link", 1) or 1)
    if args:  # client: the server named by address / hostname / instance id
        server = toolkit.find_node(node, args[0])
        if server is None and not is_loopback(args[0]):
            return refused()  # the sandbox never connects outside loopback
        if server is not None:
            server_faults = server.faults()
            if not server.is_up(server_faults):
                return refused()
            factor = max(factor, float(server_faults.get("slow_link", 1) or 1))
            args = [server.address]
    real = [REAL, "-p", "tcp" if ep == "rdm" else "udp", "-d", "lo", "-e", ep]
    for opt, val in opts:
        if opt in PASS_THROUGH:
            real += [opt, val] if val else [opt]
    real += args[:1]
    if factor <= 1:
        os.execve(REAL, real, env)
    return run_scaled(real, env, factor)


if __name__ == "__main__":
    toolkit.run_tool(main, sys.argv[1:])
