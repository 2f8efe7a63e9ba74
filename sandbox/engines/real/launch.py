"""A vLLM container command run by the real CPU build instead of the simulation.

Chosen when ``PDLIFT_SANDBOX_REAL_ENGINES`` names the real-engine virtualenv
(``scripts/setup-real-engines``) and ``PDLIFT_SANDBOX_REAL_NETNS`` the engines' namespace
(``netns.start_holder``). The rendered flags are mapped by ``flags.to_cpu`` (one table; a flag it
cannot map fails the pod, exit 1, naming it; a flag vLLM does not know fails in vLLM's own parser,
exit 2). The server runs inside the namespace on the pod's address (``PDLIFT_SANDBOX_BIND``) and a
forwarder makes it reachable there from outside. ``PDLIFT_SANDBOX_MOUNTS`` (JSON, container path ->
directory here) is how the pod's volumes reach it: the server runs in a mount namespace of its own
where each directory is bind-mounted at its container path, as the kubelet mounts a hostPath, so
the model directory the rendered command names is the node's staged copy *at the same path on
every pod*. That matters: vLLM's NIXL handshake refuses a peer whose compatibility hash differs,
and the hash covers the model path (vllm/distributed/kv_transfer/kv_connector/v1/nixl/metadata.py
``compute_nixl_compatibility_hash``: ``"model": model_config.model``). A volume whose directory
is missing fails the pod, as the kubelet's hostPath ``type: Directory`` check does.

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
        cmd = flags.to_cpu(argv, bind, cpu_features(), dict(os.environ))
    except flags.Unmappable as e:
        print(f"pdlift sandbox: this vLLM command has no CPU equivalent: {e}", file=sys.stderr, flush=True)
        return 1
    mounts = json.loads(os.environ.get(MOUNTS) or "{}")
    for inside, here in sorted(mounts.items()):
        if not Path(here).is_dir():
            print(f'pdlift sandbox: MountVolume.SetUp failed for the volume at {inside}: hostPath type check failed: '
                  f'{here} is not a directory (nothing staged on this node?)', file=sys.stderr, flush=True)
            return 1
    for note in cmd.notes:
        print(f"pdlift sandbox (real vLLM, CPU build): {note}", flush=True)
    port = _port(cmd.args)
    try:  # first: a port still held here fails the container before any engine starts
        forwarder = netns.Forwarder(namespace, (bind, port))
    except OSError as e:
        print(f"pdlift sandbox: cannot listen on {bind}:{port}: {e}", file=sys.stderr, flush=True)
        return 1
    server = subprocess.Popen(mounted(mounts, netns.command_inside(namespace, [str(python), *cmd.args])),
                              env={**os.environ, **cmd.env})
    forwarder.start()

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


# $1 ... up to "--": pairs (container path, directory here); then the command. The mount points
# are made on this machine's file system (empty directories, as the nodes' /mnt/k8s-disks/0);
# the mounts themselves exist only in the engine's mount namespace.
_MOUNT_SCRIPT = ('set -e; while [ "$1" != "--" ]; do mkdir -p "$1"; mount --bind "$2" "$1"; '
                 'mount -o remount,bind,ro "$1"; shift 2; done; shift; exec "$@"')


def mounted(mounts: dict[str, str], command: list[str]) -> list[str]:
    """``command`` in a mount namespace of its own where each directory is bind-mounted read-only
    at its container path (the engine's volumes are ``readOnly``); unchanged without mounts."""
    if not mounts:
        return command
    pairs = [word for inside, here in sorted(mounts.items()) for word in (inside, here)]
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", _MOUNT_SCRIPT, "pdlift-mounts",
            *pairs, "--", *command]


def _port(args: list[str]) -> int:
    for name, value in flags.split_flags(args):
        if name == "--port" and value is not None:
            return int(value)
    return DEFAULT_PORT
