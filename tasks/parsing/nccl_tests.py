"""Parse what an nccl-tests binary (all_reduce_perf, alltoall_perf, sendrecv_perf, ...) prints.

Accepts the text table of both column generations (``#wrong`` + ``root``, and the pre-2.13
``error`` column without ``root``), any data type, ``N/A``, ``-I 1`` per-iteration columns,
``-S 1`` timestamps, lines tagged by srun/mpirun, NCCL INFO lines interleaved, and the
``-J`` JSON file (auto-detected). Raises only ``ParseError``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tasks.errors import ParseError
from tasks.parsing import nccl_log
from tasks.parsing._common import (
    MAX_KEPT_LINES, check_text, is_int, is_number, numbered_lines, strip_prefixes, to_float, to_int,
)
from tasks.parsing.nccl_model import (
    IncompleteRow, Measurement, NcclConfig, NcclResult, NcclRow, RankInfo, busbw_at, to_json,
)

__all__ = ["parse_nccl_tests", "parse_nccl_text", "busbw_at", "to_json", "NcclResult"]

_RANK = re.compile(
    r"^#\s*Rank\s+(?P<rank>\d{1,9})(?:\s+Group\s+(?P<group>\d{1,9}))?\s+Pid\s+(?P<pid>\d{1,12})"
    r"\s+on\s+(?P<host>\S+)\s+device\s+(?P<device>\d{1,6})\s+\[(?P<bus>[^\]]*)\]\s*(?P<name>.*)$"
)
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(?P<n>\S+)(?:\s+(?P<ok>OK|FAILED))?\s*$")
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(?P<bw>\S+)(?:\s+(?P<ok>OK|FAILED))?\s*$")
_STARTING = re.compile(r"^#\s*Collective test starting:\s*(?P<name>\S+)")
_CONCLUDED = re.compile(r"^#\s*Collective test concluded:\s*(?P<name>\S+)")
_TESTS_VERSION = re.compile(r"^#\s*nccl-tests version\s+(?P<v>\S+)")
_NCCL_VERSION = re.compile(r"^\s*NCCL version\s+(?P<v>\S+)")
_ERROR_LINE = re.compile(r"^#\s*error:\s*(?P<msg>.+)$")
_CONFIG = re.compile(r"^#\s*nThread\s+\d")
_CONFIG_FIELDS = {
    "n_threads": r"nThread\s+(\d+)", "n_gpus": r"nGpus\s+(\d+)",
    "min_bytes": r"minBytes\s+(\d+)", "max_bytes": r"maxBytes\s+(\d+)",
    "warmup_iters": r"warmup iters:\s*(\d+)", "iters": r"(?<!warmup )(?<!agg )iters:\s*(\d+)",
    "validation": r"validation:\s*(\d+)", "graph": r"graph:\s*(\d+)",
}
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,31}$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_TIME = re.compile(r"^\d{2}:\d{2}:\d{2}$")


@dataclass(frozen=True)
class _Layout:
    """Which optional columns a table has; from its header, or inferred from the first row."""

    has_redop: bool
    has_root: bool
    wrong_kind: str  # "wrong" | "error"
    per_iter: bool

    @property
    def pre(self) -> int:
        return 3 + self.has_redop + self.has_root

    @property
    def group(self) -> int:
        return 8 if self.per_iter else 4


def _layout_from_header(names: list[str]) -> _Layout | None:
    if len(names) < 4 or names[0] != "size" or names[1] != "count" or "busbw" not in names:
        return None
    first_time = next((i for i, n in enumerate(names) if n in ("time", "cputime")), len(names))
    pre = names[3:first_time]
    after = names[names.index("busbw") + 1] if names.index("busbw") + 1 < len(names) else ""
    return _Layout("redop" in pre, "root" in pre, "error" if after == "error" else "wrong",
                   "i_min" in names)


def _infer_layout(tokens: list[str]) -> _Layout:
    rest = tokens[3:]
    has_redop = bool(rest) and bool(_NAME.match(rest[0])) and not is_number(rest[0])
    if has_redop:
        rest = rest[1:]
    has_root = len(rest) in (9, 17) and is_int(rest[0])
    per_iter = len(rest) - has_root >= 16
    # The '#wrong' generation always prints both redop and root (nccl-tests >= 2.13).
    return _Layout(has_redop, has_root, "wrong" if has_redop and has_root else "error", per_iter)


def _measurement(vals: list[str], layout: _Layout, where: str) -> Measurement:
    time_us = to_float(vals[0], "time", where, allow_nan=True)
    algbw = to_float(vals[1], "algbw", where, allow_nan=True)
    busbw = to_float(vals[2], "busbw", where, allow_nan=True)
    wrong: int | None = None
    max_error: float | None = None
    if vals[3] != "N/A":
        value = to_float(vals[3], "#wrong" if layout.wrong_kind == "wrong" else "error", where,
                         allow_nan=True)
        if layout.wrong_kind == "wrong":
            if not value >= 0:  # also catches NaN
                raise ParseError(f"{where}#wrong: {vals[3]!r} is not a count")
            wrong = int(min(value, 1e18))  # %6g prints big counts as 1e+06
        else:
            max_error = value
    extra: dict[str, float] = {}
    if layout.per_iter:
        for key, tok in zip(("iter_min_us", "iter_max_us", "iter_p99_us", "iter_cv_pct"), vals[4:8]):
            extra[key] = to_float(tok, key, where, allow_nan=True)
    return Measurement(time_us, algbw, busbw, wrong, max_error, **extra)


def _parse_row(tokens: list[str], layout: _Layout,
               where: str) -> tuple[NcclRow | None, IncompleteRow | None]:
    size = to_int(tokens[0], "size", where)
    count = to_int(tokens[1], "count", where)
    if size < 0 or count < 0:
        raise ParseError(f"{where}negative size or count")
    dtype = tokens[2] if len(tokens) > 2 else None
    if dtype is not None and not _NAME.match(dtype):
        raise ParseError(f"{where}type: {dtype!r} is not a data type name")
    if len(tokens) >= 2 and _TIME.match(tokens[-1]) and _DATE.match(tokens[-2]):
        tokens = tokens[:-2]  # -S 1 timestamp
    if len(tokens) <= layout.pre:
        return None, IncompleteRow(size, count, dtype)
    redop = root = None
    i = 3
    if layout.has_redop:
        redop = tokens[i]
        if not _NAME.match(redop):
            raise ParseError(f"{where}redop: {redop!r} is not an operation name")
        i += 1
    if layout.has_root:
        root = to_int(tokens[i], "root", where)
        i += 1
    metrics = tokens[i:]
    g = layout.group
    if len(metrics) not in (g, 2 * g):
        raise ParseError(f"{where}expected {2 * g} figures after the {i} leading columns, "
                         f"found {len(metrics)}")
    oop = _measurement(metrics[:g], layout, where)
    if len(metrics) == g:
        return None, IncompleteRow(size, count, dtype)  # hung between out-of-place and in-place
    ip = _measurement(metrics[g:], layout, where)
    return NcclRow(size, count, dtype or "", redop, root, oop, ip), None


def _config(line: str) -> NcclConfig:
    values: dict[str, int] = {}
    for key, pattern in _CONFIG_FIELDS.items():
        m = re.search(pattern, line)
        if m:
            values[key] = int(m.group(1))
    return NcclConfig(**values)


def _is_metric(token: str) -> bool:
    return is_number(token) or token == "N/A" or bool(_DATE.match(token) or _TIME.match(token))


class _TextParser:
    """State of one pass over the text: what has been read so far, and the current table layout."""

    def __init__(self) -> None:
        self.log = nccl_log.LogScanner()
        self.ranks: list[RankInfo] = []
        self.rows: list[NcclRow] = []
        self.warnings: list[str] = []
        self.info: dict = {}
        self.layout: _Layout | None = None
        self.incomplete: IncompleteRow | None = None
        self.pending: list[str] | None = None  # a row cut short, maybe continued on a later line
        self.seen_any = False

    def line(self, raw: str, where: str) -> None:
        stripped = self.log.feed(strip_prefixes(raw)).strip()  # evidence and fatal lines come out
        if not stripped:
            return
        if stripped.startswith("#"):
            self.seen_any |= self._comment(stripped, where)
            return
        if (m := _NCCL_VERSION.match(stripped)):
            self.info["nccl_version"] = m["v"]
            return
        tokens = stripped.split()
        starts_row = len(tokens) >= 2 and is_int(tokens[0]) and is_int(tokens[1])
        if not starts_row:
            # NCCL may log in the middle of a row (a lazy connection at a new size): the rest of
            # the row then comes on its own line, figures only.
            if self.pending is None or not all(_is_metric(t) for t in tokens):
                return  # launcher chatter, library banners: not ours to judge
            tokens = self.pending + tokens
        self.pending = None
        if self.layout is None:
            self.layout = _infer_layout(tokens)
        row, partial = _parse_row(tokens, self.layout, where)
        if row is not None:
            self.rows.append(row)
            if self.incomplete is not None and starts_row and len(self.warnings) < MAX_KEPT_LINES:
                self.warnings.append(f"the {self.incomplete.size_bytes} B row was cut short and lost")
            self.incomplete = None  # whatever stopped before, the sweep went on
        else:
            self.incomplete, self.pending = partial, tokens
        self.seen_any = True

    def _comment(self, text: str, where: str) -> bool:
        """Read a '#' line; False when it is none of the lines nccl-tests is known to print."""
        info = self.info
        if (m := _RANK.match(text)):
            self.ranks.append(RankInfo(
                rank=int(m["rank"]), host=m["host"], device=int(m["device"]), pid=int(m["pid"]),
                group=int(m["group"]) if m["group"] is not None else None,
                bus_id=m["bus"], device_name=m["name"].strip()))
        elif (m := _OOB.match(text)):
            info["out_of_bounds"] = to_int(m["n"], "out of bounds values", where)
            info["out_of_bounds_ok"] = (m["ok"] != "FAILED") if m["ok"] else None
        elif (m := _AVG.match(text)):
            info["avg_busbw_gbs"] = to_float(m["bw"], "avg bus bandwidth", where, allow_nan=True)
            info["avg_busbw_ok"] = (m["ok"] == "OK") if m["ok"] else None
        elif (m := _STARTING.match(text)):
            info.setdefault("collective", m["name"])
        elif (m := _CONCLUDED.match(text)):
            info.setdefault("collective", m["name"])
            info["concluded"] = True
        elif (m := _TESTS_VERSION.match(text)):
            info["nccl_tests_version"] = m["v"]
        elif (m := _ERROR_LINE.match(text)):
            if len(self.warnings) < MAX_KEPT_LINES:
                self.warnings.append("error: " + m["msg"][:500])
        elif _CONFIG.match(text):
            info["config"] = _config(text)
        elif (header := _layout_from_header(text.lstrip("#").split())) is not None:
            self.layout = header
        else:
            return False
        return True

    def result(self) -> NcclResult:
        if not self.seen_any and not self.log.fatal_errors:
            raise ParseError("nccl-tests: no nccl-tests output found (no preamble, table or footer)")
        return NcclResult(
            source_format="text", ranks=tuple(self.ranks), rows=tuple(self.rows),
            column_format=self.layout.wrong_kind if self.layout else None,  # type: ignore[arg-type]
            incomplete_row=self.incomplete,
            fatal_errors=self.log.resolved_fatal_errors({r.host for r in self.ranks}),
            evidence=self.log.evidence(),
            warnings=tuple(self.warnings + self.log.warnings)[:MAX_KEPT_LINES], **self.info)


def parse_nccl_text(text: str) -> NcclResult:
    """Parse the text nccl-tests prints (one run; several tables are read as one)."""
    parser = _TextParser()
    for lineno, raw in numbered_lines(check_text(text, "nccl-tests")):
        parser.line(raw, f"line {lineno}: ")
    return parser.result()


def parse_nccl_tests(text: str) -> NcclResult:
    """Parse nccl-tests output: the ``-J`` JSON document when it is one, else the text table."""
    text = check_text(text, "nccl-tests")
    if text.lstrip().startswith("{"):
        from tasks.parsing.nccl_json import parse_nccl_json

        return parse_nccl_json(text)
    return parse_nccl_text(text)
