"""A vLLM container command run by the real CPU build instead of the simulation.

Chosen when ``PDLIFT_SANDBOX_REAL_ENGINES`` names the real-engine virtualenv
(``scripts/setup-real-engines``) and ``PDLIFT_SANDBOX_REAL_NETNS`` the engines' namespace
(``netns.start_holder``). The rendered flags are mapped by ``flags.to_cpu`` (one table; a flag it
cannot map fails the pod, exit 1, naming it; a flag vLLM does not know fails in vLLM's own parser,
exit 2). The server runs inside the namespace on the pod's address (``PDLIFT_SANDBOX_BIND``) and a
forwarder makes it reachable there from outside. ``PDLIFT_SANDBOX_MOUNTS`` (JSON, container path ->
directory here) is how the pod's volumes reach it: the model directory the rendered command names
is the node's staged copy.

The process stays in front of the server: SIGTERM and SIGINT are passed on (vLLM drains for its
``--shutdown-timeout``), and it exits with the server's code.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from sandbox.engines.real import flags, netns

DEFAULT_PORT = 8000
VENV = "PDLIFT_SANDBOX_REAL_ENGINES"
NETNS = "PDLIFT_SANDBOX_REAL_NETNS"
MOUNTS = "PDLIFT_SANDBOX_MOUNTS"


def run(argv: list[str]) -> int:
    venv, namespace = os.environ.get(VENV, ""), os.environ.get(NETNS, "")
    bind = os.environ.get("PDLIFT_SANDBOX_BIND", "127.0.0.1")
    python = Path(venv) / "bin" / "python"
    if not python.exists() or not namespace:
        print(f"pdlift sandbox: real engines need {VENV} (a venv made by scripts/setup-real-engines; "
              f"{python} is missing) and {NETNS}", file=sys.stderr, flush=True)
        return 1
    try:
        cmd = flags.to_cpu(_mounted(argv, json.loads(os.environ.get(MOUNTS) or "{}")), bind, cpu_features(),
                           dict(os.environ))
    except flags.Unmappable as e:
        print(f"pdlift sandbox: this vLLM command has no CPU equivalent: {e}", file=sys.stderr, flush=True)
        return 1
    for note in cmd.notes:
        print(f"pdlift sandbox (real vLLM, CPU build): {note}", flush=True)
    port = _port(cmd.args)
    server = subprocess.Popen(netns.command_inside(namespace, [str(python), *cmd.args]),
                              env={**os.environ, **cmd.env})
    forwarder = netns.Forwarder(namespace, (bind, port)).start()

    def pass_on(signum, _frame):
        server.send_signal(signum)

    signal.signal(signal.SIGTERM, pass_on)
    signal.signal(signal.SIGINT, pass_on)
    try:
        return server.wait()
    finally:
        forwarder.stop()


def cpu_features() -> frozenset[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def _mounted(argv: list[str], mounts: dict[str, str]) -> list[str]:
    """Each word naming a path under a mounted container path, as the directory it is mounted from."""
    out = []
    for word in argv:
        for inside, here in sorted(mounts.items(), key=lambda m: -len(m[0])):
            if word == inside or word.startswith(inside.rstrip("/") + "/"):
                word = here + word[len(inside.rstrip("/")):]
                break
        out.append(word)
    return out


def _port(args: list[str]) -> int:
    for name, value in flags.split_flags(args):
        if name == "--port" and value is not None:
            return int(value)
    return DEFAULT_PORT
