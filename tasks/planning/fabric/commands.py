"""The exact commands of each fabric validation layer: argument lists, environment, timeouts. Pure.

Every command is an argument list (the SSH adapter quotes each word), never a shell string; the
short scripts below take their inputs as positional parameters ("$@", "${4}"), so a host name or
a device name printed by a node reaches the tool as one literal argument and nothing else runs.
Sources (docs/sources.md#fabric-commands): the EFA installer's efa_test.sh and awsome
``checks/6-efa-loopback.sh`` (per-NIC loopback, negative control), awsome's AMI sbatch and DLC
``testEFA`` (mpirun and its ``-x`` variables), nccl-tests' ``-c 1 -T -J`` (hard failures,
watchdog, JSON output).
"""

from __future__ import annotations

import ipaddress
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from blueprints.schema import FabricSpec

GPU_QUERY = "index,name,uuid,driver_version,memory.total,pci.bus_id"
PINGPONG_ITERATIONS = 10  # fi_pingpong's own default: a connectivity and latency check, not line rate
# Per-NIC loopbacks are judged on their exit code (awsome check 6): one message size, above the
# small sizes whose best time is the latency, because a single-size run's time includes the
# connection set-up. Latency is judged on the pairwise fi_pingpong, which sweeps every size.
LOOPBACK_SIZE = "8192"
MAX_SWEEP_BYTES = 16 << 30  # nccl-tests sweep from the judging size up to 16 GiB (docs/sources.md#nccl-sweep-sizes)
NCCL_GRACE_S = 15  # the command outlives nccl-tests' own -T watchdog, so its "Test timeout" line arrives
INVENTORY_TIMEOUT_S = 120
HOUSEKEEPING_TIMEOUT_S = 30
# A device no NIC is called: pinned to it, fi_getinfo must fail (the negative control).
ABSENT_DEVICE = "efa-pdlift-absent0"
# fi_pingpong control ports: below Linux's ephemeral range (32768-60999), so no outgoing
# connection holds one, and clear of fi_pingpong's default 47592.
PORT_LOW, PORT_SPAN = 20000, 12000
ADDRESS_IN_USE = "Address already in use"
NCCL_BINARIES = {"all_reduce": "all_reduce_perf", "alltoall": "alltoall_perf", "sendrecv": "sendrecv_perf"}
# What a process of ours looks like in `ps` (the sandbox runs them as python3 ... tool.py too).
OUR_TOOLS = frozenset({"all_reduce_perf", "alltoall_perf", "sendrecv_perf", "fi_pingpong", "mpirun"})
LISTENING_MARKER = "pdlift-listening"
NEVER_LISTENED = "pdlift: server did not listen within"
_SAFE = re.compile(r"[^A-Za-z0-9_.-]")

# Start a fi_pingpong server, say on stderr once its control port listens (read from the
# kernel's socket table, so no probe connection is taken for the client), and give up after
# $3 seconds (by the clock in /proc/uptime, not a loop count a busy node would stretch) if it
# never does. $1: the port as /proc/net/tcp prints it (4 hex digits); $2: the local addresses
# that count as this server's, as the table prints them (``listen_addresses``): a listener on
# the same port bound to another address (another node's server, where nodes share a kernel, or
# any other program's) is not ours, and taking it for ours starts the client too early.
SERVE_SCRIPT = r"""p=$1; a=$2; w=$3; shift 3
"$@" &
c=$!
read t _ </proc/uptime; end=$((${t%.*}${t#*.} + w * 100)); late=  # centiseconds
while :; do
  if grep -Eq "^ *[0-9]+: ($a):$p [0-9A-F]+:[0-9A-F]+ 0A " /proc/net/tcp /proc/net/tcp6 2>/dev/null; then
    echo "pdlift-listening $p" >&2; break
  fi
  kill -0 $c 2>/dev/null || break
  read t _ </proc/uptime; [ ${t%.*}${t#*.} -lt $end ] || { late=1; break; }
  sleep 0.05
done
if [ -n "$late" ]; then echo "pdlift: server did not listen within $w s (killed)" >&2; kill -KILL $c 2>/dev/null; fi
wait $c"""

# One NIC's loopback in one SSH session (as the EFA installer's efa_test.sh): the server in the
# background with its output aside, the client once the server listens, then both logs under
# "Client Log:" / "Server Log:". $1 port (hex), $2 the server's local addresses (as in
# SERVE_SCRIPT), $3 listen wait (s), $4 how many of the remaining words are the server's argv;
# the rest is the client's. Words are referenced by index ("${4}"), so eval never re-reads their
# content. Exit: the client's status, else the server's.
LOOPBACK_SCRIPT = r"""p=$1; a=$2; w=$3; n=$4; shift 4
s=; c=; i=1
while [ $i -le $n ]; do s="$s \"\${$i}\""; i=$((i + 1)); done
while [ $i -le $# ]; do c="$c \"\${$i}\""; i=$((i + 1)); done
t=$(mktemp) || exit 1
trap 'rm -f "$t"; exit 143' TERM HUP INT
eval "$s >\"\$t\" 2>&1 &"
sp=$!
read u _ </proc/uptime; end=$((${u%.*}${u#*.} + w * 100)); up=; late=  # centiseconds
while :; do
  if grep -Eq "^ *[0-9]+: ($a):$p [0-9A-F]+:[0-9A-F]+ 0A " /proc/net/tcp /proc/net/tcp6 2>/dev/null; then
    up=1; break
  fi
  kill -0 $sp 2>/dev/null || break
  read u _ </proc/uptime; [ ${u%.*}${u#*.} -lt $end ] || { late=1; break; }
  sleep 0.05
done
rc=
echo "Client Log:"
if [ -n "$up" ]; then eval "$c 2>&1"; rc=$?
elif [ -n "$late" ]; then echo "pdlift: server did not listen within $w s (killed)"; kill -KILL $sp 2>/dev/null
else echo "pdlift: server exited before listening"; fi
if [ -n "$rc" ] && [ "$rc" -ne 0 ]; then  # a failed client leaves the server waiting: 2 s, then stop it
  j=0; while kill -0 $sp 2>/dev/null && [ $j -lt 40 ]; do sleep 0.05; j=$((j + 1)); done
  kill -KILL $sp 2>/dev/null
fi
wait $sp; src=$?
echo "Server Log:"; cat "$t"; rm -f "$t"
if [ -n "$rc" ] && [ "$rc" -ne 0 ]; then exit $rc; fi
exit $src"""

# Print a file, then remove it; the exit status is cat's.
FETCH_SCRIPT = r"""cat -- "$1"; s=$?; rm -f -- "$1"; exit $s"""


@dataclass(frozen=True)
class Command:
    """One remote command: what runs, with which extra environment, for how long at most."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 60.0

    @property
    def shown(self) -> str:
        """The command as an operator would type it (for reports and logs; no secrets here)."""
        prefix = [f"{k}={v}" for k, v in self.env.items()]
        return shlex.join([*prefix, *self.argv])


# --- layer 1: inventory -------------------------------------------------------------------------

def gpu_inventory() -> Command:
    return Command(("nvidia-smi", f"--query-gpu={GPU_QUERY}", "--format=csv"), timeout_s=INVENTORY_TIMEOUT_S)


def efa_inventory() -> Command:
    return Command(("fi_info", "-p", "efa", "-t", "FI_EP_RDM"), timeout_s=INVENTORY_TIMEOUT_S)


def libfabric_version() -> Command:
    return Command(("fi_info", "--version"), timeout_s=INVENTORY_TIMEOUT_S)


def parse_versions(text: str) -> dict[str, str]:
    """``fi_info --version`` prints 'fi_info: 1.22.0' / 'libfabric: 1.22.0amzn4.0' / 'libfabric api: 1.22'."""
    out = {}
    for line in text.splitlines()[:20]:
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("libfabric", "libfabric api") and value.strip():
            out[key.strip()] = value.strip()[:80]
    return out


# --- layer 2 and the pairwise fi_pingpong --------------------------------------------------------

def listen_addresses(*addresses: str) -> str:
    """The local addresses of a listening socket that count as a server's own, as /proc/net/tcp
    and tcp6 print them, joined for the scripts' ``grep -E``: the wildcard (the real fi_pingpong
    binds its control socket to INADDR_ANY, util/pingpong.c) and each of ``addresses`` (the
    node's own, where something binds it there), in IPv4 and in IPv6's v4-mapped form. The kernel
    prints each 32-bit word of an address in host order: 127.0.0.1 is 0100007F on x86 and ARM."""
    words = ["00000000", "0" * 32]
    for address in addresses:
        packed = ipaddress.IPv4Address(address).packed
        word = packed[::-1].hex().upper()
        words += [word, "0000000000000000FFFF0000" + word]
    return "|".join(dict.fromkeys(words))


def port_at(base: int, n: int) -> int:
    """The n-th control port of a run that starts at ``base`` (wrapping inside the range)."""
    return PORT_LOW + (base - PORT_LOW + n) % PORT_SPAN


def _pingpong_env(device: str | None) -> dict[str, str]:
    # Without it same-host traffic goes over SHM and the NIC is never exercised (efa_test.sh).
    env = {"FI_EFA_ENABLE_SHM_TRANSFER": "0", "FI_LOG_LEVEL": "warn"}
    if device is not None:
        env["FI_EFA_IFACE"] = device  # the real pinning variable (FI_EFA_DEVICE_NAME is not one)
    return env


def _pingpong(device: str | None, *ports: str, size: str | None = None) -> list[str]:
    argv = ["fi_pingpong", "-e", "rdm", "-p", "efa"]
    if device is not None:
        argv += ["-d", f"{device}-rdm"]
    return argv + [*ports, "-I", str(PINGPONG_ITERATIONS)] + (["-S", size] if size else [])


def pingpong_server(port: int, spec: FabricSpec, address: str) -> Command:
    """A pair's server on the node at ``address`` (the address its peer's client connects to),
    wrapped so it announces when it listens there (then the peer's client starts)."""
    wait = spec.test_timeout_s
    argv = ("sh", "-c", SERVE_SCRIPT, "pdlift-serve", f"{port:04X}", listen_addresses(address), str(wait),
            *_pingpong(None, "-B", str(port)))
    # Waiting to listen, then serving one client run: at most twice the test timeout.
    return Command(argv, _pingpong_env(None), 2 * spec.test_timeout_s + NCCL_GRACE_S)


def pingpong_client(server: str, port: int, spec: FabricSpec) -> Command:
    return Command((*_pingpong(None, "-P", str(port)), server), _pingpong_env(None), spec.test_timeout_s)


def loopback(device: str, port: int, spec: FabricSpec, address: str) -> Command:
    """Server and client on one node (at ``address``) in one session, both pinned to ``device``
    (FI_EFA_IFACE and -d).

    Each NIC's server listens on its own control port (-B), the client connects to it (-P) from
    a port the kernel picks: a fixed client port could meet one already in use.
    """
    server = _pingpong(device, "-B", str(port), size=LOOPBACK_SIZE)
    client = [*_pingpong(device, "-P", str(port), size=LOOPBACK_SIZE), "localhost"]
    wait = spec.test_timeout_s
    # The server's own listener is on the node's address (or the wildcard), never 127.0.0.1 though
    # the client names "localhost": a listener there is another program's, and taking it for ours
    # started the client before our server listened ("Connection refused", a node replaced).
    argv = ("sh", "-c", LOOPBACK_SCRIPT, "pdlift-loopback", f"{port:04X}", listen_addresses(address),
            str(wait), str(len(server)), *server, *client)
    return Command(argv, _pingpong_env(device), wait + spec.test_timeout_s + NCCL_GRACE_S)


def negative_control(port: int, spec: FabricSpec, address: str) -> Command:
    """The same loopback pinned to a device that does not exist: it must fail, or pinning is void."""
    return loopback(ABSENT_DEVICE, port, spec, address)


# --- layers 3-5: nccl-tests ----------------------------------------------------------------------

def _sweep(spec: FabricSpec, gpus_per_process: int, json_path: str) -> list[str]:
    """Fixed large sizes, data checked (-c 1: #wrong), a watchdog (-T), JSON (-J: nccl-tests >= 2.18.5)."""
    low = spec.judge_size_bytes
    high = max(low, MAX_SWEEP_BYTES)
    return ["-b", str(low), "-e", str(high), "-f", "2", "-g", str(gpus_per_process), "-c", "1",
            "-T", str(spec.test_timeout_s), "-J", json_path]


def single_node_all_reduce(spec: FabricSpec, json_path: str) -> Command:
    """all_reduce_perf on one node's GPUs (NVLink), at fixed large sizes only."""
    argv = ("all_reduce_perf", *_sweep(spec, spec.gpus, json_path))
    return Command(argv, {"NCCL_DEBUG": "INFO"}, spec.test_timeout_s + NCCL_GRACE_S)


MPI_ENV = (("FI_PROVIDER", "efa"), ("FI_EFA_USE_DEVICE_RDMA", "1"), ("NCCL_DEBUG", "INFO"))


def across_nodes(collective: str, hosts: Sequence[str], spec: FabricSpec, json_path: str) -> Command:
    """One process per GPU on each host (``-np 8N -N 8``), launched from the first host.

    NCCL_DEBUG=INFO is what proves the path: 'Selected Provider is efa', 'Using network
    Libfabric', '/GDRDMA'. FI_PROVIDER=efa keeps libfabric off any other provider.
    """
    binary = NCCL_BINARIES[collective]
    g = spec.gpus
    argv = ["mpirun", "--allow-run-as-root", "--host", ",".join(f"{h}:{g}" for h in hosts),
            "-np", str(g * len(hosts)), "-N", str(g), "--bind-to", "none",
            "--mca", "pml", "^ucx", "--mca", "btl", "tcp,self"]
    for name, value in MPI_ENV:
        argv += ["-x", f"{name}={value}"]
    argv += [binary, *_sweep(spec, 1, json_path)]
    return Command(tuple(argv), {}, spec.test_timeout_s + NCCL_GRACE_S)


# --- housekeeping --------------------------------------------------------------------------------

def scratch_dir(run_id: str) -> str:
    """Where nccl-tests write their -J files on a node (relative to the login directory)."""
    return f".pdlift/fabric/{_SAFE.sub('_', run_id)[:64] or 'run'}"


def json_path(run_id: str, test_id: str) -> str:
    return f"{scratch_dir(run_id)}/{_SAFE.sub('_', test_id)[:120]}.json"


def make_scratch(run_id: str) -> Command:
    return Command(("mkdir", "-p", scratch_dir(run_id)), timeout_s=HOUSEKEEPING_TIMEOUT_S)


def fetch_and_remove(path: str) -> Command:
    return Command(("sh", "-c", FETCH_SCRIPT, "pdlift-fetch", path), timeout_s=HOUSEKEEPING_TIMEOUT_S)


def list_processes() -> Command:
    return Command(("ps", "-eo", "pid=,args="), timeout_s=HOUSEKEEPING_TIMEOUT_S)


def serving_on(ps_text: str, port: int) -> list[int]:
    """PIDs of our fi_pingpong processes using control port ``port`` (unique within a run)."""
    return [pid for pid, args in leftover_processes(ps_text)
            if "fi_pingpong" in args and f"-B {port} " in f"{args} "]


def kill_processes(pids: Sequence[int]) -> Command:
    return Command(("kill", "-KILL", *(str(int(p)) for p in pids)), timeout_s=HOUSEKEEPING_TIMEOUT_S)


def leftover_processes(ps_text: str) -> list[tuple[int, str]]:
    """(pid, command line) of every process in ``ps -eo pid=,args=`` that runs one of our tools."""
    found = []
    for line in ps_text.splitlines():
        pid, _, args = line.strip().partition(" ")
        if not pid.isdigit():
            continue
        words = args.split()
        names = {w.rsplit("/", 1)[-1].removesuffix(".py") for w in words[:4]}
        if names & OUR_TOOLS:
            found.append((int(pid), args.strip()[:200]))
    return found
