"""Layers 1-3 and 5 of fabric validation: inventory, per-NIC loopback, single node, whole set.

Each layer runs what its nodes still need (results of nodes validated in an earlier pass are
kept in the ``Cache``), judges every current node with the planning verdicts, and returns a
``Layer``: its records, the nodes to isolate with their evidence, or a reason to stop the stage
that no node replacement can fix (the negative control passing, the whole set failing).

Progress: each layer plans its units in ``Ctx.tally`` when it starts (``tasks.planning.fabric.plan``
says which), ticks one as each is done (from the worker threads) and reports the tally from the
calling thread while it waits and when it ends (``Ctx.report``).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from blueprints.schema import FabricSpec
from tasks.adapters.ssh import SshNode, run_on_all
from tasks.errors import ParseError
from tasks.parsing.fi_info import parse_fi_info
from tasks.parsing.nvidia_smi import parse_nvidia_smi
from tasks.planning.fabric import (
    PingpongRun, Verdict, judge_full_set, judge_inventory, judge_nics, judge_single_nodes, negative_control,
)
from tasks.planning.fabric import commands
from tasks.planning.fabric.outcome import Cache, Inventory, Layer
from tasks.planning.fabric.plan import FULL_SET_COLLECTIVES, LAYERS
from tasks.planning.progress import Count, Tally
from tasks.planning.records import Node
from tasks.stages.fabric_exec import Runner, raise_fatal
from tasks.stages.nodes import ssh_target

UNREACHABLE_ATTEMPTS = 2  # each is the SSH adapter's own bounded connection retries
UNREACHABLE_PAUSE_S = 2.0

OnProgress = Callable[[list[Count], bool], None]  # (units done of planned per layer, final)


@dataclass
class Ctx:
    spec: FabricSpec
    runner: Runner
    log: Callable[[str], None]
    port_base: int
    cache: Cache = field(default_factory=Cache)
    timed_out: set[str] = field(default_factory=set)
    on_progress: OnProgress | None = None
    tally: Tally = field(default_factory=lambda: Tally(LAYERS))
    _n: itertools.count = field(default_factory=itertools.count)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def ports(self, count: int) -> list[int]:
        with self._lock:
            return [commands.port_at(self.port_base, next(self._n)) for _ in range(count)]

    def note_timeouts(self, node: str, runs) -> None:
        if any(getattr(r, "timed_out", False) for r in runs):
            with self._lock:
                self.timed_out.add(node)

    def report(self, final: bool = False) -> None:
        """The tally, to whoever shows progress (the task's artifacts); on the calling thread only."""
        if self.on_progress is not None:
            self.on_progress(self.tally.counts(), final)

    def finish(self, layer: Layer, nodes: list[Node], start: float) -> Layer:
        """After a layer with a timeout, make sure no process of ours is left on its nodes."""
        if self.timed_out:
            layer.leftovers = self.runner.sweep([ssh_target(n) for n in nodes], f"sweep-{layer.name}")
            self.timed_out.clear()
        layer.seconds = time.monotonic() - start
        self.report()
        return layer


def isolating(records) -> dict[str, str]:
    """Node -> the evidence of its ISOLATE records (a pair record counts for both its nodes)."""
    out: dict[str, list[str]] = {}
    for r in records:
        if r.verdict is Verdict.ISOLATE:
            for node in r.nodes:
                out.setdefault(node, []).append(f"{r.subject}: {'; '.join(r.reasons[:3])}")
    return {n: " | ".join(v[:4]) for n, v in out.items()}


def _on_all(ctx: Ctx, layer: str, nodes: list[Node], fn) -> None:
    """``fn`` on every node at once; each node done (whatever its result) is one unit of ``layer``."""
    ctx.tally.plan(layer, len(nodes))

    def counted(node: SshNode) -> None:
        try:
            fn(node)
        finally:
            ctx.tally.tick(layer)

    raise_fatal(run_on_all([ssh_target(n) for n in nodes], counted, max_parallel=ctx.runner.max_parallel,
                           on_tick=ctx.report))


# --- layer 1 ---------------------------------------------------------------------------------------

def _parse(parser, ran) -> tuple[object | None, str | None]:
    text = ran.stdout if ran.stdout.strip() else ran.stderr
    try:
        return parser(text), None
    except ParseError as e:
        return None, f"{e} (exit {ran.exit_code}: {ran.tail()})"


def _inventory_one(ctx: Ctx, node: SshNode) -> Inventory:
    for attempt in range(UNREACHABLE_ATTEMPTS):
        smi = ctx.runner.run(node, commands.gpu_inventory(), f"inventory-{node.name}-nvidia-smi")
        if smi.error is None or smi.timed_out or attempt + 1 == UNREACHABLE_ATTEMPTS:
            break
        time.sleep(UNREACHABLE_PAUSE_S)
    if smi.error is not None:
        return Inventory(None, None, smi.error, {})
    info = ctx.runner.run(node, commands.efa_inventory(), f"inventory-{node.name}-fi_info")
    version = ctx.runner.run(node, commands.libfabric_version(), f"inventory-{node.name}-fi_info-version")
    gpus, gpu_error = _parse(parse_nvidia_smi, smi)
    fi, fi_error = _parse(parse_fi_info, info)
    versions = dict(commands.parse_versions(version.stdout))
    if gpus is not None:
        versions["nvidia driver"] = ", ".join(gpus.driver_versions)
        versions["gpu model"] = ", ".join(gpus.models)
    if fi is not None and fi.entries:
        versions["efa provider"] = fi.entries[0].version or ""
    return Inventory(gpus, fi, "; ".join(e for e in (gpu_error, fi_error, info.error) if e) or None, versions)


def inventory(ctx: Ctx, nodes: list[Node]) -> Layer:
    start, cache = time.monotonic(), ctx.cache
    todo = [n for n in nodes if n.name not in cache.inventory]
    ctx.log(f"fabric layer 1 (inventory): {len(todo)} node(s)")

    def one(node: SshNode) -> None:
        cache.inventory[node.name] = _inventory_one(ctx, node)

    _on_all(ctx, "inventory", todo, one)
    records = tuple(judge_inventory(n.name, cache.inventory[n.name].gpus, cache.inventory[n.name].fi_info,
                                    ctx.spec, error=cache.inventory[n.name].error) for n in nodes)
    return ctx.finish(Layer("inventory", records, isolating(records)), nodes, start)


# --- layer 2 ---------------------------------------------------------------------------------------

def _loopback(ctx: Ctx, ssh: SshNode, device: str | None, test_id: str) -> PingpongRun:
    """One pinned loopback (device None: the negative control); once more on a fresh port when
    its control port turned out to be taken, which says nothing about the NIC."""
    for attempt in (1, 2):
        port = ctx.ports(1)[0]
        cmd = (commands.negative_control(port, ctx.spec, ssh.address) if device is None
               else commands.loopback(device, port, ctx.spec, ssh.address))
        run = ctx.runner.loopback(ssh, cmd, test_id if attempt == 1 else f"{test_id}-again")
        taken = run.result is not None and any(commands.ADDRESS_IN_USE in e for e in run.result.errors)
        if not taken:
            break
    return run


def _loopbacks(ctx: Ctx, node: Node, devices: tuple[str, ...]) -> None:
    ssh, cache = ssh_target(node), ctx.cache
    cache.control[node.name] = _loopback(ctx, ssh, None, f"loopback-{node.name}-negative-control")

    def one(device: str) -> None:
        cache.loopback[(node.name, device)] = _loopback(ctx, ssh, device, f"loopback-{node.name}-{device}")

    with ThreadPoolExecutor(max_workers=ctx.spec.loopbacks_per_node, thread_name_prefix="pdlift-nic") as pool:
        list(pool.map(one, devices))
    ctx.note_timeouts(node.name, [cache.control[node.name], *(cache.loopback[(node.name, d)] for d in devices)])


def loopback(ctx: Ctx, nodes: list[Node]) -> Layer:
    start, cache = time.monotonic(), ctx.cache
    todo = [n for n in nodes if n.name not in cache.control]
    ctx.log(f"fabric layer 2 (per-NIC loopback + negative control): {len(todo)} node(s)")
    by_name = {n.name: n for n in todo}
    _on_all(ctx, "loopback", todo, lambda s: _loopbacks(ctx, by_name[s.name], cache.inventory[s.name].devices))
    names = {n.name for n in nodes}
    nics = judge_nics({k: r for k, r in cache.loopback.items() if k[0] in names}, ctx.spec)
    controls = tuple(negative_control(n.name, cache.control[n.name]) for n in nodes)
    layer = Layer("loopback", (*controls, *nics), isolating(nics))
    void = [r.subject for r in controls if r.verdict is Verdict.ISOLATE]
    if void:
        layer.stop = (f"the loopback pinned to nonexistent device {commands.ABSENT_DEVICE} passed on "
                      f"{', '.join(void)}: NIC pinning (FI_EFA_IFACE / -d) is not in effect, so no per-NIC "
                      "result can be trusted; check the EFA installer and libfabric version")
    return ctx.finish(layer, nodes, start)


# --- layer 3 ---------------------------------------------------------------------------------------

def single_node(ctx: Ctx, nodes: list[Node]) -> Layer:
    start, cache = time.monotonic(), ctx.cache
    todo = [n for n in nodes if n.name not in cache.single]
    ctx.log(f"fabric layer 3 (single-node all_reduce on {ctx.spec.gpus} GPUs): {len(todo)} node(s)")

    def one(node: SshNode) -> None:
        run = ctx.runner.nccl(node, "all_reduce", f"single-{node.name}-all_reduce",
                              lambda path: commands.single_node_all_reduce(ctx.spec, path))
        cache.single[node.name] = run
        ctx.note_timeouts(node.name, [run])

    _on_all(ctx, "single-node", todo, one)
    records = judge_single_nodes({n.name: cache.single[n.name] for n in nodes}, ctx.spec)
    return ctx.finish(Layer("single-node", records, isolating(records)), nodes, start)


# --- layer 5 ---------------------------------------------------------------------------------------

def full_set(ctx: Ctx, nodes: list[Node]) -> Layer:
    start, cache = time.monotonic(), ctx.cache
    ctx.log(f"fabric layer 5 (whole set: all_reduce + alltoall over {len(nodes)} nodes)")
    first, hosts = ssh_target(nodes[0]), [n.address for n in nodes]
    ctx.tally.plan("full-set", len(FULL_SET_COLLECTIVES))
    ran = []
    for c in FULL_SET_COLLECTIVES:
        ran.append(ctx.runner.nccl(first, c, f"set-{c}",
                                   lambda path, c=c: commands.across_nodes(c, hosts, ctx.spec, path)))
        ctx.tally.tick("full-set")
        ctx.report()
    runs = cache.full_set = tuple(ran)
    ctx.note_timeouts(first.name, runs)
    record = judge_full_set([n.name for n in nodes], runs, ctx.spec)
    layer = Layer("full-set", (record,))
    if record.verdict is Verdict.ISOLATE:
        layer.stop = (f"the whole set of {len(nodes)} nodes failed although every node and pair passed: "
                      + "; ".join(record.reasons[:4]))
    return ctx.finish(layer, nodes, start)
