"""Free loopback ports for the sandbox's servers, tests, benchmarks and the demo.

Chosen at random *below* the kernel's ephemeral range (net.ipv4.ip_local_port_range, 32768-60999
by default), never by binding port 0: port 0 hands out an ephemeral port, and between closing the
probe and the server's own bind any outgoing connection on this machine may be given the same port
as its source. On a busy two-core machine that happened (werkzeug: "Port N is in use by another
program"). Ports below the range are never given to outgoing connections, so only another server
could take one, and every caller checks that the ports are bindable first.
"""

from __future__ import annotations

import os
import random
import socket
import threading
import time
from pathlib import Path

LOWEST = 10000
# The fabric stage's fi_pingpong control ports (tasks/planning/fabric/commands.py PORT_LOW and
# PORT_SPAN): fixed by design, so a node's leftover listener is found by its port. A sandbox server
# given one of them can lose it to a loopback (a chaos trial's Prefect server found its port in use
# while another test validated a fabric), and a loopback can take the server's for its own.
FABRIC_PORTS = range(20000, 32000)
# Ports a browser refuses to open (the Fetch Standard's "bad port" list, fetch.spec.whatwg.org
# #port-blocking; 10080 since whatwg/fetch#1191): Chromium fails page.goto with ERR_UNSAFE_PORT, so
# a Prefect server on one has a UI nobody can open (the browser test drew 10080 once). Only 10080
# lies in the range drawn from; the whole list is kept so the rule reads as the standard's.
BROWSER_BAD_PORTS = frozenset({
    1, 7, 9, 11, 13, 15, 17, 19, 20, 21, 22, 23, 25, 37, 42, 43, 53, 69, 77, 79, 87, 95, 101, 102,
    103, 104, 109, 110, 111, 113, 115, 117, 119, 123, 135, 137, 139, 143, 161, 179, 389, 427, 465,
    512, 513, 514, 515, 526, 530, 531, 532, 540, 548, 554, 556, 563, 587, 601, 636, 989, 990, 993,
    995, 1719, 1720, 1723, 2049, 3659, 4045, 4190, 5060, 5061, 6000, 6566, 6665, 6666, 6667, 6668,
    6669, 6679, 6697, 10080,
})
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_DEFAULT_EPHEMERAL_LOW = 32768
# Independent of the `random` module's global seed, which seeded tests and benchmarks set.
_PICK = random.SystemRandom()
# The ports this process has handed out, and when. A port is checked free here, then bound only
# once the server it was chosen for starts: a second draw in between found it still free and handed
# it out again (an engine stack's four ports drawn one after another, two of them equal: "[Errno 98]
# address already in use" when the second of its servers started, in a suite run). None is handed
# out again within HANDED_FOR_S; by then its server has bound it (so it is not bindable) or never will.
HANDED_FOR_S = 300.0
_HANDED: dict[int, float] = {}
_HANDED_LOCK = threading.Lock()
_now = time.monotonic
# The suite's slots ("FIRST,TOTAL", set by scripts/test for each lane). A test that clears a child's
# environment keeps this one: without it the child draws ports from another lane's slice.
SLOT_VARIABLE = "PDLIFT_TEST_SLOTS"


def suite_slot() -> tuple[int, int]:
    """(this process's slot, how many slots) among the test processes that run at once: the
    pytest-xdist worker's index (0 in a plain run) after the first slot of its lane (scripts/test
    sets PDLIFT_TEST_SLOTS="FIRST,TOTAL" for each lane); (0, 1) outside the suite. The sandboxes,
    servers and flow runs a test starts inherit both variables, and so its slot."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    index = int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else 0
    first, _, total = os.environ.get(SLOT_VARIABLE, "").partition(",")
    if first.isdigit() and total.isdigit():
        return int(first) + index, max(int(total), int(first) + index + 1)
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    return index, max(count, index + 1)


class NoFreePort(RuntimeError):
    """No free port (run) found in the tries allowed."""


def ephemeral_low() -> int:
    """The first port the kernel gives to outgoing connections."""
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return _DEFAULT_EPHEMERAL_LOW


def bindable(port: int, host: str = "127.0.0.1", reuse_address: bool = False) -> bool:
    """Whether a server could listen on ``host:port`` now. ``reuse_address`` binds as Go's net
    package and Python's servers do (SO_REUSEADDR): connections of a stopped server left in
    TIME_WAIT then do not keep a restarted one from its own port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        if reuse_address:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def suite_share(low: int, high: int) -> tuple[int, int]:
    """This test process's share [first, last] of [low, high] (all of it outside the suite):
    no other test process of the run draws from it (ports here, loopback octets in the tests)."""
    index, count = suite_slot()
    width = (high - low + 1) // count
    if width < 1:
        raise ValueError(f"{low}..{high} cannot be split between {count} test processes")
    return low + index * width, low + (index + 1) * width - 1


def free_port(host: str = "127.0.0.1", span: int = 1, also: tuple[str, ...] = (), offsets: tuple[int, ...] = (),
              tries: int = 200) -> int:
    """A port p free on ``host`` and every address in ``also`` (pods of one group listen on one
    port number), together with p+1 .. p+span-1 (DP rank ports) and p+o for each o in ``offsets``
    (SeaweedFS's gRPC ports), every one of them below the ephemeral range and none a port
    browsers refuse (any of them may serve a UI)."""
    reach = max((span - 1, *offsets))
    high = ephemeral_low() - 1 - reach
    if high <= LOWEST:
        raise NoFreePort(f"the ephemeral range starts at {ephemeral_low()}: no room below it for a run of {reach + 1}")
    # Each test process draws from a slice of its own, as it does for loopback addresses
    # (tests/fixtures/loopback.py): a port is checked free, then bound by a server started after
    # it, and a test on another worker drawing the same port in between took it (moto's "Port N is
    # in use by another program" when the suite's two lanes and three workers started servers at once).
    low = LOWEST
    if suite_slot()[1] > 1:  # its share of the ports below the fabric's; their SeaweedFS offsets follow
        low, high = suite_share(LOWEST, min(high, FABRIC_PORTS.start - span))
    with _HANDED_LOCK:
        now = _now()
        for stale in [p for p, at in _HANDED.items() if now - at >= HANDED_FOR_S]:
            del _HANDED[stale]
        for _ in range(tries):
            port = _PICK.randint(low, high)
            wanted = [port + i for i in range(span)] + [port + o for o in offsets]
            # The run itself only: an offset of 10000 (SeaweedFS's gRPC ports) below the ephemeral range
            # cannot keep out of 20000-31999 too.
            if any(p in FABRIC_PORTS for p in wanted[:span]) or any(p in BROWSER_BAD_PORTS for p in wanted):
                continue
            if any(p in _HANDED for p in wanted):
                continue
            if all(bindable(p, h) for h in (host, *also) for p in wanted):
                _HANDED.update(dict.fromkeys(wanted, now))
                return port
    raise NoFreePort(f"no free port run (span {span}, offsets {offsets}) on {host} {' '.join(also)} "
                     f"in {tries} tries below {ephemeral_low()}")
