"""Layer 4: pairwise tests in a round-robin tournament, then a second pass for the suspects.

Round robin (circle method): N-1 rounds of N/2 disjoint pairs, the pairs of a round in
parallel. Each pair runs fi_pingpong (server on the first node, client on the second) and
nccl-tests all_reduce, alltoall and sendrecv across the two nodes (mpirun from the first).
The bad node is the one common to the failing pairs; suspects the evidence cannot single out
are re-paired with known-good nodes. Pairs measured in an earlier pass are kept (``Cache``).
Progress counts rounds: the tournament's, then the second pass's once it is planned (the
tournament's last round is reported with it, so the layer never shows 100% before a second pass).
"""

from __future__ import annotations

import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor

from tasks.planning.fabric import commands
from tasks.planning.fabric import (
    PairRuns, attribute_pairs, judge_pairs, pair_key, pair_name, pending_rounds, round_robin_rounds,
    second_pass_rounds,
)
from tasks.planning.fabric.pairing import Pair
from tasks.planning.fabric.outcome import Layer
from tasks.planning.records import Node
from tasks.stages.fabric_layers import Ctx, isolating
from tasks.stages.nodes import ssh_target

COLLECTIVES = ("all_reduce", "alltoall", "sendrecv")


def _run_pair(ctx: Ctx, a: Node, b: Node, tag: str) -> PairRuns:
    spec, test = ctx.spec, f"pair-{tag}-{a.name}-{b.name}"
    for attempt in (1, 2):  # once more on a fresh port if the control port was taken
        port = ctx.ports(1)[0]
        ping = ctx.runner.pingpong(ssh_target(a), ssh_target(b), (commands.pingpong_server(port, spec, a.address),
                                                      commands.pingpong_client(a.address, port, spec)),
                                   f"{test}-fi_pingpong" + ("" if attempt == 1 else "-again"),
                                   spec.test_timeout_s + 5, port)
        if ping.result is None or not any(commands.ADDRESS_IN_USE in e for e in ping.result.errors):
            break
    hosts = [a.address, b.address]
    nccl = tuple(ctx.runner.nccl(ssh_target(a), c, f"{test}-{c}",
                                 lambda path, c=c: commands.across_nodes(c, hosts, spec, path))
                 for c in COLLECTIVES)
    ctx.note_timeouts(a.name, [ping, *nccl])
    return PairRuns(nccl, ping)


def _run_round(ctx: Ctx, pairs: tuple[Pair, ...], by_name: dict[str, Node], tag: str,
               into: dict[Pair, PairRuns]) -> None:
    """The round's pairs at once; the round done is one unit of progress (reported by the caller)."""
    workers = max(1, min(len(pairs), ctx.runner.max_parallel))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pdlift-pair") as pool:
        futures = {p: pool.submit(_run_pair, ctx, by_name[p[0]], by_name[p[1]], tag) for p in pairs}
        for pair, future in futures.items():
            into[pair_key(*pair)] = future.result()  # a host key refused stops the stage here
    ctx.tally.tick("pairwise")


def pairwise(ctx: Ctx, nodes: list[Node]) -> Layer:
    start, cache = time.monotonic(), ctx.cache
    names, by_name = [n.name for n in nodes], {n.name: n for n in nodes}
    rounds = pending_rounds(names, cache.pairs)
    ctx.log(f"fabric layer 4 (pairwise): {sum(len(r) for r in rounds)} pair(s) in {len(rounds)} round(s)")
    ctx.tally.plan("pairwise", len(rounds))
    for i, pairs in enumerate(rounds, 1):
        ctx.log(f"  round {i}/{len(rounds)}: " + ", ".join(pair_name(p) for p in pairs))
        _run_round(ctx, pairs, by_name, "p1", cache.pairs)
        if i < len(rounds):  # the last is reported with the second pass it may call for: never 100% too soon
            ctx.report()
    current = {pair_key(*p): cache.pairs[pair_key(*p)] for r in round_robin_rounds(names) for p in r}
    first = judge_pairs(current, ctx.spec)
    finding, node_records = attribute_pairs(names, first)
    second: tuple = ()
    extra_rounds = 0
    if finding.suspects and finding.good:
        again = second_pass_rounds(finding.suspects, finding.good, already_tested=current)
        extra_rounds = len(again)
        ctx.log(f"  second pass for suspect(s) {', '.join(finding.suspects)}: "
                + "; ".join(", ".join(pair_name(p) for p in r) for r in again))
        measured: dict[Pair, PairRuns] = {}
        ctx.tally.add("pairwise", len(again))
        ctx.report()
        for pairs in again:
            _run_round(ctx, pairs, by_name, "p2", measured)
            ctx.report()
        cache.second_pass.update(measured)
        second = tuple(dataclasses.replace(r, subject=f"{r.subject} (second pass)")
                       for r in judge_pairs(measured, ctx.spec))
        finding, node_records = attribute_pairs(names, first, second)
    layer = Layer("pairwise", (*first, *second, *node_records), rounds=len(rounds) + extra_rounds)
    bad = set(finding.bad)
    layer.isolate = {n: e for n, e in isolating(node_records).items() if n in bad}
    if not bad and (finding.suspects or finding.unexplained_pairs):
        pairs = finding.unexplained_pairs or finding.failing_pairs
        reasons = [f"{r.subject}: {'; '.join(r.reasons[:2])}" for r in (*first, *second)
                   if r.verdict.value == "ISOLATE"][:4]
        layer.stop = (f"pair(s) {', '.join(pair_name(p) for p in pairs)} failed and cannot be pinned on one node"
                      + (f" (suspects: {', '.join(finding.suspects)}; no known-good partner settled it)"
                         if finding.suspects else " (both nodes passed with other partners: a link or a "
                                                  "transient fault)") + ": " + " | ".join(reasons))
    return ctx.finish(layer, nodes, start)
