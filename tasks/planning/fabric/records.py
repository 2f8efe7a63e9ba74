"""Verdict records: what was measured, against which threshold, and what follows from it.

PASS / MONITOR / ISOLATE mirror awsome-distributed-training's health-check severities:
ISOLATE means replace the node ("replace, don't repair"), MONITOR means keep it but note it
(statistical outlier, missing GPUDirect). Every verdict carries its checks, so a report can
print the figures against the thresholds without re-deriving anything.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from tasks.parsing._common import jsonable
from tasks.parsing.nccl_model import NcclResult
from tasks.parsing.pingpong import PingpongResult

Scope = Literal["node", "nic", "pair", "set"]


class Verdict(str, enum.Enum):
    PASS = "PASS"
    MONITOR = "MONITOR"
    ISOLATE = "ISOLATE"

    @property
    def severity(self) -> int:
        return _SEVERITY[self]


_SEVERITY = {Verdict.PASS: 0, Verdict.MONITOR: 1, Verdict.ISOLATE: 2}


def worst(verdicts: Iterable[Verdict]) -> Verdict:
    return max(verdicts, key=lambda v: v.severity, default=Verdict.PASS)


@dataclass(frozen=True)
class Check:
    name: str  # 'all_reduce busbw @ 1 GiB (out-of-place)'
    verdict: Verdict
    measured: float | int | str | None = None
    threshold: float | int | str | None = None
    unit: str = ""
    detail: str = ""  # one sentence a report can print as-is


@dataclass(frozen=True)
class VerdictRecord:
    scope: Scope
    subject: str  # 'node-a', 'node-a/rdmap16s27', 'node-a<->node-b', 'all'
    nodes: tuple[str, ...]
    verdict: Verdict
    checks: tuple[Check, ...]

    @property
    def reasons(self) -> tuple[str, ...]:
        return tuple(c.detail or c.name for c in self.checks if c.verdict is not Verdict.PASS)


def record(scope: Scope, subject: str, nodes: Iterable[str], checks: Iterable[Check]) -> VerdictRecord:
    checks = tuple(checks)
    return VerdictRecord(scope, subject, tuple(nodes), worst(c.verdict for c in checks), checks)


def with_checks(rec: VerdictRecord, extra: Iterable[Check]) -> VerdictRecord:
    return record(rec.scope, rec.subject, rec.nodes, (*rec.checks, *extra))


def to_json(records: Iterable[VerdictRecord]) -> list[dict[str, Any]]:
    return [dict(jsonable(r), reasons=list(r.reasons)) for r in records]


@dataclass(frozen=True)
class NcclRun:
    """One nccl-tests run as the stage saw it: the parsed output plus how the process ended."""

    collective: str  # 'all_reduce', 'alltoall', 'sendrecv' (a '_perf' suffix is dropped)
    result: NcclResult | None  # None when nothing parseable came back
    exit_code: int | None = None  # None when unknown (killed, connection lost)
    timed_out: bool = False  # stopped by our own timeout
    error: str | None = None  # why there is no result: the ParseError or transport error

    @property
    def name(self) -> str:
        return self.collective.removesuffix("_perf")


@dataclass(frozen=True)
class PingpongRun:
    result: PingpongResult | None
    exit_code: int | None = None
    timed_out: bool = False
    error: str | None = None


@dataclass(frozen=True)
class PairRuns:
    """Everything run across one pair: nccl-tests collectives and an fi_pingpong."""

    nccl: tuple[NcclRun, ...] = ()
    pingpong: PingpongRun | None = None


def human_size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"
