"""Typed, frozen records of one nccl-tests run, whichever format (text or ``-J`` JSON) it came in.

Column meanings follow ``writeResultHeader``/``writeBenchmarkLineBody`` in NVIDIA/nccl-tests
``src/util.cu``: per size, an out-of-place and an in-place measurement of time (us), algbw and
busbw (GB/s) and ``#wrong`` (wrong elements; ``N/A`` when checking is off). Before the 2022
resync (NCCL 2.13) the last column was ``error`` (maximum relative error) and there was no
``root`` column; both generations land in the same records.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from tasks.parsing._common import jsonable

Placement = Literal["out_of_place", "in_place"]
FatalKind = Literal["nccl", "cuda", "test", "timeout"]


@dataclass(frozen=True)
class Measurement:
    time_us: float
    algbw_gbs: float
    busbw_gbs: float
    wrong: int | None = None  # '#wrong' elements; None when printed N/A or in the old format
    max_error: float | None = None  # pre-2.13 'error' column (maximum relative error)
    # Only with -I 1 (per-iteration timing).
    iter_min_us: float | None = None
    iter_max_us: float | None = None
    iter_p99_us: float | None = None
    iter_cv_pct: float | None = None


@dataclass(frozen=True)
class NcclRow:
    size_bytes: int
    count: int
    dtype: str
    redop: str | None
    root: int | None
    out_of_place: Measurement | None
    in_place: Measurement | None

    def measurement(self, placement: Placement) -> Measurement | None:
        return self.out_of_place if placement == "out_of_place" else self.in_place

    @property
    def wrong_total(self) -> int:
        return sum(m.wrong or 0 for m in (self.out_of_place, self.in_place) if m is not None)


@dataclass(frozen=True)
class IncompleteRow:
    """A size whose line was started but never finished: the test hung or died there."""

    size_bytes: int
    count: int | None
    dtype: str | None


@dataclass(frozen=True)
class RankInfo:
    """One '#  Rank N Group G Pid P on HOST device D [bus] NAME' line: which GPU a rank used."""

    rank: int
    host: str
    device: int
    pid: int | None = None
    group: int | None = None
    bus_id: str | None = None
    device_name: str = ""


@dataclass(frozen=True)
class FatalError:
    kind: FatalKind
    message: str
    host: str | None = None
    source: str | None = None  # "common.cu:961"
    line: str = ""  # the raw line (truncated), for the report


@dataclass(frozen=True)
class NetEvidence:
    """What the NCCL INFO log says about the network path that was actually used."""

    providers: tuple[str, ...] = ()  # 'NET/OFI Selected provider is efa'
    fabrics: tuple[str, ...] = ()  # ', fabric is efa-direct' (aws-ofi-nccl >= 1.14)
    networks: tuple[str, ...] = ()  # 'Using network AWS Libfabric'
    libfabric_channels: bool = False  # 'via NET/AWS Libfabric/0'
    gdrdma: bool = False  # 'NET/AWS Libfabric/0/GDRDMA': GPUDirect RDMA in use
    socket: bool = False  # 'Using network Socket' / 'via NET/Socket': TCP fallback

    @property
    def efa_provider(self) -> bool:
        return bool(self.providers) and all(p == "efa" for p in self.providers)

    @property
    def libfabric_network(self) -> bool:
        return bool(self.networks) and all("libfabric" in n.lower() for n in self.networks)

    @property
    def efa(self) -> bool:
        """EFA proven: the OFI plugin chose efa, NCCL used Libfabric, and nothing went over sockets."""
        return self.efa_provider and (self.libfabric_network or self.libfabric_channels) and not self.socket


@dataclass(frozen=True)
class NcclConfig:
    """The '# nThread 1 nGpus 8 minBytes ... validation: 1 graph: 0' preamble."""

    n_threads: int | None = None
    n_gpus: int | None = None
    min_bytes: int | None = None
    max_bytes: int | None = None
    warmup_iters: int | None = None
    iters: int | None = None
    validation: int | None = None
    graph: int | None = None


@dataclass(frozen=True)
class NcclResult:
    source_format: Literal["text", "json"]
    collective: str | None = None  # program name, e.g. 'all_reduce_perf'
    nccl_tests_version: str | None = None
    nccl_version: str | None = None
    config: NcclConfig | None = None
    ranks: tuple[RankInfo, ...] = ()
    column_format: Literal["wrong", "error"] | None = None
    rows: tuple[NcclRow, ...] = ()
    incomplete_row: IncompleteRow | None = None
    out_of_bounds: int | None = None
    out_of_bounds_ok: bool | None = None
    avg_busbw_gbs: float | None = None  # sweep-wide average: reported, never judged
    avg_busbw_ok: bool | None = None  # OK/FAILED suffix, only with NCCL_TESTS_MIN_BW
    concluded: bool = False  # '# Collective test concluded' (newer versions)
    fatal_errors: tuple[FatalError, ...] = ()
    warnings: tuple[str, ...] = ()
    evidence: NetEvidence = field(default_factory=NetEvidence)

    @property
    def complete(self) -> bool:
        """The footer was printed: the sweep ran to its end."""
        return self.out_of_bounds is not None

    @property
    def hosts(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for r in self.ranks:
            seen.setdefault(r.host, None)
        return tuple(seen)

    @property
    def wrong_total(self) -> int:
        return sum(r.wrong_total for r in self.rows)

    def hard_failures(self) -> tuple[str, ...]:
        """Why this run fails regardless of bandwidth (empty when nothing is wrong)."""
        reasons = [f"{e.kind} failure{' on ' + e.host if e.host else ''}: {e.message}"
                   for e in self.fatal_errors]
        for r in self.rows:
            if r.wrong_total:
                reasons.append(f"{r.wrong_total} wrong elements at {r.size_bytes} B ({r.dtype})")
        if self.out_of_bounds_ok is False or (self.out_of_bounds or 0) > 0:
            reasons.append(f"out of bounds values: {self.out_of_bounds} FAILED")
        if self.avg_busbw_ok is False:
            reasons.append("average bus bandwidth below NCCL_TESTS_MIN_BW (FAILED)")
        if self.incomplete_row is not None:
            reasons.append(f"stopped during the {self.incomplete_row.size_bytes} B step")
        if not self.complete:
            reasons.append("output ended before the summary footer (test did not finish)")
        elif not self.rows:
            reasons.append("no result rows")
        return tuple(reasons)


def busbw_at(result: NcclResult, size_bytes: int, placement: Placement = "out_of_place",
             dtype: str | None = None) -> float | None:
    """Bus bandwidth at a fixed message size: the nearest row at or above ``size_bytes``.

    Judging happens here, never on the sweep-wide 'Avg bus bandwidth' (which averages tiny
    latency-bound sizes in). When several rows share that size (several types or ops), the
    lowest busbw is returned. None when the sweep never reached the size.
    """
    candidates = [r for r in result.rows
                  if r.size_bytes >= size_bytes and (dtype is None or r.dtype == dtype)
                  and r.measurement(placement) is not None]
    if not candidates:
        return None
    nearest = min(r.size_bytes for r in candidates)
    values = [r.measurement(placement).busbw_gbs for r in candidates  # type: ignore[union-attr]
              if r.size_bytes == nearest]
    if any(math.isnan(v) for v in values):
        return math.nan
    return min(values)


def to_json(result: NcclResult) -> dict[str, Any]:
    """Plain-JSON view for `pdlift fabric parse nccl FILE --json` and persisted raw results."""
    data = jsonable(result)
    data["complete"] = result.complete
    data["hosts"] = list(result.hosts)
    data["hard_failures"] = list(result.hard_failures())
    data["evidence"]["efa"] = result.evidence.efa
    return data
