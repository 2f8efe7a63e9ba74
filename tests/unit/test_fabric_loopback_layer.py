"""Layer 2's orchestration over a FakeShell at the SSH seam: how many per-NIC loopbacks run at once
on one node (the blueprint's ``fabric.loopbacks_per_node``), and that every NIC still gets one."""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass

import pytest
from pydantic import ValidationError

from blueprints.schema import FabricSpec
from tasks.adapters.ssh import CommandResult
from tasks.planning.fabric import commands as fc
from tasks.planning.records import Node
from tasks.stages.fabric_exec import Runner
from tasks.stages.fabric_layers import Ctx, loopback

DEVICES = tuple(f"rdmap{n}s0" for n in range(16))
CLIENT_LOG = """Client Log:
bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec
8k      10      =10      160k        0.00s    180.00      45.50       0.02
Server Log:
"""
NODES = [Node(f"i-{c}", f"10.0.0.{i}", "decode", ("ssh-ed25519 AAAA",)) for i, c in enumerate("ab", 1)]


@dataclass
class _Settings:
    max_parallel: int = 8


@dataclass
class _Inventory:
    devices: tuple[str, ...]


class CountingShell:
    """Counts how many loopbacks run on each node at once. Each one waits (at most half a second)
    until ``limit`` run on its node, so a pool allowed that many reaches it however slowly its
    threads start; one allowed more would pass it."""

    def __init__(self, limit: int):
        self.limit, self.settings = limit, _Settings()
        self._lock = threading.Condition()
        self.now: Counter[str] = Counter()
        self.most: Counter[str] = Counter()
        self.devices: list[tuple[str, str]] = []

    def run(self, node, argv, *, timeout_s, env=None, stdin=b"", on_line=None, check=True, secrets=None):
        assert argv[:3] == ["sh", "-c", fc.LOOPBACK_SCRIPT]
        device = env["FI_EFA_IFACE"]
        with self._lock:
            self.now[node.name] += 1
            self.most[node.name] = max(self.most[node.name], self.now[node.name])
            self.devices.append((node.name, device))
            self._lock.notify_all()
            self._lock.wait_for(lambda: self.now[node.name] >= self.limit, timeout=0.5)
        time.sleep(0.01)  # and a moment more, unlocked: one past the limit would be counted now
        with self._lock:
            self.now[node.name] -= 1
        if device == fc.ABSENT_DEVICE:
            code, out = 61, "Client Log:\n[error] util/pingpong.c:1258: fi_getinfo(): ret=-61 (No data available)\n"
        else:
            code, out = 0, CLIENT_LOG
        for line in out.splitlines():
            on_line("stdout", line)
        return CommandResult(node.name, " ".join(argv), code, out, "", 0.02)


def _layer(spec: FabricSpec) -> tuple[CountingShell, object]:
    shell = CountingShell(spec.loopbacks_per_node)
    ctx = Ctx(spec, Runner(shell, "r1"), lambda m: None, port_base=0)
    for n in NODES:
        ctx.cache.inventory[n.name] = _Inventory(DEVICES)  # type: ignore[assignment]
    return shell, loopback(ctx, NODES)


@pytest.mark.parametrize("limit", [1, 3, 8, 10])
def test_at_most_the_blueprints_loopbacks_run_at_once_on_a_node_and_every_nic_gets_one(limit):
    shell, layer = _layer(FabricSpec(loopbacks_per_node=limit, test_timeout_s=5))

    assert dict(shell.most) == {n.name: limit for n in NODES}  # the limit is reached, never passed
    for n in NODES:
        tried = sorted(d for node, d in shell.devices if node == n.name)
        assert tried == sorted([*DEVICES, fc.ABSENT_DEVICE])
    assert not layer.isolate and layer.stop is None


def test_eight_loopbacks_at_once_unless_the_blueprint_says_otherwise():
    shell, _ = _layer(FabricSpec(test_timeout_s=5))

    assert set(shell.most.values()) == {8}


@pytest.mark.parametrize("bad", [0, 11])
def test_a_loopback_limit_outside_what_sshd_allows_is_refused(bad):
    with pytest.raises(ValidationError, match="loopbacks_per_node"):
        FabricSpec(loopbacks_per_node=bad)
