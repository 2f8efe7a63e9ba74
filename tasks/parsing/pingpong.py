"""Parse fi_pingpong output (``show_perf`` in ofiwg/libfabric ``util/pingpong.c``).

The table is ``bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec`` (an optional ``name``
column first). Sizes print with binary k/m/g suffixes and one decimal below 10 ("1.2k"), counts
with decimal k/m/b suffixes ("10k"); ``#ack`` is ``=N`` when every message was acked, ``+N``
when N were lost and ``-N`` when N more acks than sends came back. Failures are
``Ns timeout expired``, ``Error at iteration=... size=... byte=...`` (with ``-c``), the
``[error] file:line: ...`` and ``call(): file:line, ret=N (...)`` lines, or a non-zero exit
code, which the caller passes in (``timeout(1)`` exits 124). Raises only ``ParseError``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tasks.errors import ParseError
from tasks.parsing._common import (
    MAX_KEPT_LINES, check_text, jsonable, numbered_lines, split_prefixes, to_float,
)

_SIZE = re.compile(r"^(\d{1,19})(?:\.(\d))?([kmg]?)$", re.ASCII)
_COUNT = re.compile(r"^(\d{1,19})([kmb]?)$", re.ASCII)
_ACK = re.compile(r"^([=+-])(\d{1,19}[kmb]?)$", re.ASCII)
_TIME = re.compile(r"^(.+)s$")
_HEADER = re.compile(r"^(?:name\s+)?bytes\s+#sent\s+#ack\s+total\s+time\s+MB/sec\s+usec/xfer\s+Mxfers/sec\s*$")
_TIMEOUT = re.compile(r"(\d{1,9})s timeout expired")
_INTEGRITY = re.compile(r"Error at iteration=(-?\d+) size=(-?\d+) byte=(-?\d+)")
_PP_ERR = re.compile(r"^\[error\]\s+(?P<msg>.*)$")
_PP_PRINTERR = re.compile(r"^(?P<call>[\w/.]+)\(\):\s+\S+:\d+\s*,\s+ret=(?P<ret>-?\d+)\s+\((?P<msg>.*)\)\s*$")
_SECTION = re.compile(r"^(?P<label>Server|Client)\s+Log:\s*$", re.IGNORECASE)
_BINARY = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
_DECIMAL = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9}
TIMEOUT_EXIT_CODE = 124  # what timeout(1) returns when it had to stop the command


@dataclass(frozen=True)
class PingpongRow:
    size_bytes: int
    sent: int
    acked: int
    lost: int  # '+N': sent but never acknowledged
    total_bytes: int  # approximate: printed with one significant decimal at most
    time_s: float
    mb_per_s: float
    usec_per_xfer: float
    mxfers_per_s: float
    name: str | None = None


@dataclass(frozen=True)
class PingpongTable:
    label: str | None  # the launcher tag ('rank 1') or log section ('Server'), when there is one
    rows: tuple[PingpongRow, ...]


@dataclass(frozen=True)
class PingpongResult:
    tables: tuple[PingpongTable, ...]
    exit_code: int | None = None
    timeout_s: int | None = None  # from 'Ns timeout expired'
    integrity_errors: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()

    @property
    def rows(self) -> tuple[PingpongRow, ...]:
        return tuple(r for t in self.tables for r in t.rows)

    @property
    def timed_out(self) -> bool:
        return self.timeout_s is not None or self.exit_code == TIMEOUT_EXIT_CODE

    @property
    def lost(self) -> int:
        return sum(r.lost for r in self.rows)

    def latency_us(self, max_size_bytes: int = 4096) -> float | None:
        """Best usec/xfer among the small messages.

        The first size absorbs connection set-up (803 us for 64 B beside 8 us for 256 B in
        the EFA installer's own sample), so the best small-message figure is the link's latency.
        """
        values = [r.usec_per_xfer for r in self.rows if r.size_bytes <= max_size_bytes]
        return min(values) if values else None

    def failures(self, *, include_exit_code: bool = True) -> tuple[str, ...]:
        """Why this run failed (empty when it did not); the exit code can be left to the caller."""
        reasons = []
        if include_exit_code and self.exit_code not in (None, 0):
            reasons.append(f"exit code {self.exit_code}"
                           + (" (stopped by timeout)" if self.exit_code == TIMEOUT_EXIT_CODE else ""))
        if self.timeout_s is not None:
            reasons.append(f"no completion within {self.timeout_s} s (timeout expired)")
        reasons += [f"data integrity: {e}" for e in self.integrity_errors]
        reasons += [f"error: {e}" for e in self.errors]
        if self.lost:
            reasons.append(f"{self.lost} messages sent but never acknowledged")
        if not self.rows and not reasons:
            reasons.append("no result rows")
        return tuple(reasons)

    @property
    def ok(self) -> bool:
        return not self.failures()


def _size(token: str, what: str, where: str) -> int:
    m = _SIZE.match(token)
    if not m:
        raise ParseError(f"{where}{what}: {token!r} is not a fi_pingpong size")
    whole, frac, mag = m.groups()
    return (int(whole) * 10 + int(frac or 0)) * _BINARY[mag] // 10


def _count(token: str, what: str, where: str) -> int:
    m = _COUNT.match(token)
    if not m:
        raise ParseError(f"{where}{what}: {token!r} is not a fi_pingpong count")
    return int(m.group(1)) * _DECIMAL[m.group(2)]


def _row(tokens: list[str], where: str) -> PingpongRow:
    name = None
    if len(tokens) == 9:
        name, tokens = tokens[0], tokens[1:]
    if len(tokens) != 8:
        raise ParseError(f"{where}expected 8 columns (bytes #sent #ack total time MB/sec "
                         f"usec/xfer Mxfers/sec), found {len(tokens)}")
    size = _size(tokens[0], "bytes", where)
    sent = _count(tokens[1], "#sent", where)
    ack = _ACK.match(tokens[2])
    if not ack:
        raise ParseError(f"{where}#ack: {tokens[2]!r} is not =N, +N or -N")
    n = _count(ack.group(2), "#ack", where)
    acked, lost = {"=": (n, 0), "+": (sent - n, n), "-": (sent + n, 0)}[ack.group(1)]
    time = _TIME.match(tokens[4])
    if not time:
        raise ParseError(f"{where}time: {tokens[4]!r} does not end in 's'")
    return PingpongRow(size, sent, acked, lost, _size(tokens[3], "total", where),
                       to_float(time.group(1), "time", where),
                       to_float(tokens[5], "MB/sec", where, allow_nan=True),
                       to_float(tokens[6], "usec/xfer", where, allow_nan=True),
                       to_float(tokens[7], "Mxfers/sec", where, allow_nan=True), name)


def _looks_like_row(tokens: list[str]) -> bool:
    return (len(tokens) >= 3 and bool(_ACK.match(tokens[2]))) or \
        (len(tokens) >= 4 and bool(_ACK.match(tokens[3])) and not _ACK.match(tokens[2]))


def parse_pingpong(text: str, exit_code: int | None = None) -> PingpongResult:
    """Parse one fi_pingpong run (server, client, or both interleaved with launcher tags)."""
    text = check_text(text, "fi_pingpong")
    if exit_code is not None and (isinstance(exit_code, bool) or not isinstance(exit_code, int)):
        raise ParseError(f"fi_pingpong: exit code must be an integer, got {exit_code!r:.40}")
    tables: dict[str | None, list[list[PingpongRow]]] = {}
    section: str | None = None
    timeout_s: int | None = None
    integrity: list[str] = []
    errors: list[str] = []
    seen_header = False
    for lineno, raw in numbered_lines(text):
        where = f"line {lineno}: "
        tag, line = split_prefixes(raw)
        line = line.strip()
        if not line:
            continue
        if (m := _SECTION.match(line)):
            section = m["label"].capitalize()
            continue
        label = tag or section
        if _HEADER.match(line):
            tables.setdefault(label, []).append([])
            seen_header = True
            continue
        if (m := _TIMEOUT.search(line)):
            timeout_s = int(m.group(1))
            continue
        if (m := _INTEGRITY.search(line)):
            if len(integrity) < MAX_KEPT_LINES:
                integrity.append(m.group(0))
            continue
        if (m := _PP_ERR.match(line)) or _PP_PRINTERR.match(line):
            if len(errors) < MAX_KEPT_LINES:
                errors.append((m["msg"] if m else line)[:500])
            continue
        tokens = line.split()
        if _looks_like_row(tokens):
            runs = tables.setdefault(label, [])
            if not runs:
                runs.append([])
            runs[-1].append(_row(tokens, where))
    result = PingpongResult(
        tables=tuple(PingpongTable(label, tuple(rows)) for label, runs in tables.items() for rows in runs),
        exit_code=exit_code, timeout_s=timeout_s, integrity_errors=tuple(integrity),
        errors=tuple(errors))
    if not (seen_header or result.rows or timeout_s is not None or integrity or errors
            or exit_code not in (None, 0)):
        raise ParseError("fi_pingpong: no fi_pingpong table or error found")
    return result


def to_json(result: PingpongResult) -> dict[str, Any]:
    """Plain-JSON view for `pdlift fabric parse pingpong FILE --json`."""
    data = jsonable(result)
    data.update(timed_out=result.timed_out, lost=result.lost, latency_us=jsonable(result.latency_us()),
                failures=list(result.failures()), ok=result.ok)
    return data
