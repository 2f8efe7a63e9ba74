"""From pair verdicts to node verdicts, and from every layer's records to one verdict per node."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tasks.planning.fabric.pairing import (
    BadNodeFinding, Pair, find_bad_nodes, pair_key, settle_second_pass,
)
from tasks.planning.fabric.records import Check, Verdict, VerdictRecord, record


def _failed(records: Iterable[VerdictRecord]) -> dict[Pair, bool]:
    out: dict[Pair, bool] = {}
    for r in records:
        if r.scope != "pair" or len(r.nodes) != 2:
            raise ValueError(f"{r.subject}: not a pair record")
        key = pair_key(*r.nodes)
        out[key] = out.get(key, False) or r.verdict is Verdict.ISOLATE
    return out


def attribute_pairs(nodes: Sequence[str], pair_records: Iterable[VerdictRecord],
                    second_pass: Iterable[VerdictRecord] = ()) -> tuple[BadNodeFinding, tuple[VerdictRecord, ...]]:
    """Which nodes the failing (ISOLATE) pairs point at, and a node record for each.

    Bad nodes ISOLATE, with the failing pairs' reasons as evidence. Suspects that the second
    pass could not tell apart (no known-good partner was available) MONITOR: the failing
    pair records still stand, so the stage cannot pass on them.
    """
    pair_records = list(pair_records)
    finding = find_bad_nodes(nodes, _failed(pair_records))
    second = list(second_pass)
    if second:
        finding = settle_second_pass(finding, _failed(second))
    by_node: dict[str, list[str]] = {}
    for r in (*pair_records, *second):
        if r.verdict is Verdict.ISOLATE:
            for n in r.nodes:
                by_node.setdefault(n, []).append(f"{r.subject}: {'; '.join(r.reasons[:3])}")
    out = []
    for node in nodes:
        reason = finding.reasons.get(node, "")
        evidence = by_node.get(node, [])
        if node in finding.bad:
            check = Check("pairwise attribution", Verdict.ISOLATE, len(evidence), None, "failing pairs",
                          f"{reason}. " + " | ".join(evidence[:6]))
        elif node in finding.suspects:
            check = Check("pairwise attribution", Verdict.MONITOR, len(evidence), None, "failing pairs",
                          f"{reason}; no known-good partner settled it")
        elif node in finding.untested:
            check = Check("pairwise attribution", Verdict.MONITOR, 0, None, "pairs",
                          "not in any pair test")
        else:
            check = Check("pairwise attribution", Verdict.PASS, len(evidence), None, "failing pairs", reason)
        out.append(record("node", node, (node,), [check]))
    return finding, tuple(out)


def node_verdicts(nodes: Sequence[str], *layers: Iterable[VerdictRecord]) -> tuple[VerdictRecord, ...]:
    """One record per node: every node- and NIC-scoped check about it, worst verdict wins."""
    checks: dict[str, list[Check]] = {n: [] for n in nodes}
    for layer in layers:
        for r in layer:
            if r.scope in ("node", "nic") and len(r.nodes) == 1 and r.nodes[0] in checks:
                prefix = f"{r.subject}: " if r.scope == "nic" else ""
                checks[r.nodes[0]] += [Check(prefix + c.name, c.verdict, c.measured, c.threshold,
                                             c.unit, (prefix + c.detail) if c.detail else "")
                                       for c in r.checks]
    return tuple(record("node", n, (n,), checks[n]) for n in nodes)
