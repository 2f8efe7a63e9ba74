"""Scan NCCL's own log lines (NCCL_DEBUG=INFO) and nccl-tests' fatal lines out of a run's output.

The evidence lines are the ones AWS's DLC CI greps for: ``NET/OFI Selected Provider is efa``,
``Using network (AWS )?Libfabric`` and ``NET/(AWS )?Libfabric/N/GDRDMA``; ``NET/Socket`` means
the traffic fell back to TCP. Fatal lines come from the CUDACHECK/NCCLCHECK/TESTCHECK macros in
nccl-tests ``src/common.h`` and the ``-T`` watchdog in ``src/common.cu``; they can start in the
middle of a table row, because the row's first columns are printed before the collective runs.
"""

from __future__ import annotations

import re

from tasks.parsing._common import MAX_KEPT_LINES, check_text, strip_prefixes
from tasks.parsing.nccl_model import FatalError, NetEvidence

# Each pattern starts with a literal, so a search is linear in the line length; what stands
# before the match (host, pid) is read from a bounded tail of the text in front of it.
_LOG = re.compile(r"NCCL (?P<level>INFO|WARN)\b(?P<msg>.*)$")
_LOG_PREFIX = re.compile(r"\S+:\d+:\d+\s+\[\d+\]\s+(?:\S+:\d+\s+)?$")
_FATAL = re.compile(
    r"Test (?:(?P<kind>NCCL|CUDA) failure\s+(?P<src>[^\s:]+:\d+)\s*(?P<msg>.*)$"
    r"|timeout \((?P<secs>\d{1,9})s\)(?:\s+(?P<tsrc>[^\s:]+:\d+))?"
    r"|failure\s+(?P<fsrc>[^\s:]+:\d+))")
_TESTCHECK_PREFIX = re.compile(r"\.\.\s+(?P<host>\S+)\s+pid\s+\d+:\s*$")
_TAIL = 256  # host names and log prefixes are far shorter
# A row's root column ('    -1') is printed right before whatever NCCL or nccl-tests says in
# the middle of the row, so the host name arrives glued to it: '-1ip-10-0-0-1:...'. Host names
# cannot start with '-', and rooted tests' roots are followed by a host's first letter.
_GLUED_ROOT = re.compile(r"-1(?=[^\s:])|\d{1,9}(?=[A-Za-z])")
_PROVIDER = re.compile(r"NET/OFI Selected provider is ([^\s,()]+)", re.IGNORECASE)
_FABRIC = re.compile(r"\bfabric is ([^\s,()]+)")
_NETWORK = re.compile(r"\bUsing network (.+?)\s*$")
_LIBFABRIC = re.compile(r"NET/(?:AWS )?Libfabric/\d+")
_GDRDMA = re.compile(r"NET/(?:AWS )?Libfabric/\d+/GDRDMA")
_SOCKET = re.compile(r"via NET/Socket/\d+")
_MAX_DISTINCT = 16
_MAX_LINE = 500


class LogScanner:
    """Feed it lines one by one; it keeps the evidence and hands back what is not a log line."""

    def __init__(self) -> None:
        self.fatal_errors: list[FatalError] = []
        self.warnings: list[str] = []
        self._providers: dict[str, None] = {}
        self._fabrics: dict[str, None] = {}
        self._networks: dict[str, None] = {}
        self._libfabric = self._gdrdma = self._socket = False

    def feed(self, line: str) -> str:
        fatal = self._fatal(line)
        if fatal is not None:
            error, start = fatal
            if len(self.fatal_errors) < MAX_KEPT_LINES:
                self.fatal_errors.append(error)
            line = line[:start]
        m = _LOG.search(line)
        if m is None:
            return line
        self._evidence(m["level"], m["msg"].strip())
        start = m.start()
        tail_at = max(0, start - _TAIL)
        prefix = _LOG_PREFIX.search(line[tail_at:start])
        return line[:_unglue(line, tail_at + prefix.start())] if prefix else line[:start]

    @staticmethod
    def _host_before(line: str, start: int) -> tuple[str | None, int]:
        """The 'HOST: ' written just before a fatal message, and where it begins."""
        before = line[max(0, start - _TAIL):start].rstrip()
        if not before.endswith(":"):
            return None, start
        words = before[:-1].split()
        if not words or ":" in words[-1]:
            return None, start
        at = _unglue(line, line.rindex(words[-1], 0, start))
        return line[at:line.index(":", at)], at

    def _fatal(self, line: str) -> tuple[FatalError, int] | None:
        m = _FATAL.search(line)
        if m is None:
            return None
        raw = line.strip()[:_MAX_LINE]
        if m["kind"]:
            host, start = self._host_before(line, m.start())
            msg = m["msg"].strip().strip("'").strip()[:_MAX_LINE]
            return FatalError(m["kind"].lower(), msg or f"{m['kind']} failure",  # type: ignore[arg-type]
                              host, m["src"], raw), start
        if m["secs"]:
            host, start = self._host_before(line, m.start())
            return FatalError("timeout", f"no progress for {m['secs']} s (test timeout)",
                              host, m["tsrc"], raw), start
        tail_at = max(0, m.start() - _TAIL)
        pre = _TESTCHECK_PREFIX.search(line[tail_at:m.start()])
        host, start = (pre["host"], tail_at + pre.start()) if pre else (None, m.start())
        return FatalError("test", f"test failure at {m['fsrc']}", host, m["fsrc"], raw), start

    def _evidence(self, level: str, msg: str) -> None:
        if level == "WARN":
            if len(self.warnings) < MAX_KEPT_LINES:
                self.warnings.append(msg[:_MAX_LINE])
            return
        if (m := _PROVIDER.search(msg)) and len(self._providers) < _MAX_DISTINCT:
            self._providers.setdefault(m.group(1).lower(), None)
        if (m := _FABRIC.search(msg)) and len(self._fabrics) < _MAX_DISTINCT:
            self._fabrics.setdefault(m.group(1), None)
        if (m := _NETWORK.search(msg)) and len(self._networks) < _MAX_DISTINCT:
            network = m.group(1)[:64]
            self._networks.setdefault(network, None)
            if network.lower() == "socket":
                self._socket = True
        if _LIBFABRIC.search(msg):
            self._libfabric = True
        if _GDRDMA.search(msg):
            self._gdrdma = True
        if _SOCKET.search(msg):
            self._socket = True

    def evidence(self) -> NetEvidence:
        return NetEvidence(tuple(self._providers), tuple(self._fabrics), tuple(self._networks),
                           self._libfabric, self._gdrdma, self._socket)

    def resolved_fatal_errors(self, known_hosts: set[str]) -> tuple[FatalError, ...]:
        """Fatal errors with their host names repaired where a row's root was glued to them.

        A failure inside a row prints '<row start>    -1ip-10-0-0-1: Test NCCL failure ...':
        the host token then reads '-1ip-10-0-0-1'; the known host it ends with is the real one.
        """
        fixed = []
        for e in self.fatal_errors:
            host = e.host
            if host is not None and host not in known_hosts:
                matches = [h for h in known_hosts if host.endswith(h)]
                if matches:
                    host = max(matches, key=len)
            fixed.append(FatalError(e.kind, e.message, host, e.source, e.line))
        return tuple(fixed)


def _unglue(line: str, start: int) -> int:
    """Where a host name really begins when a row's root may be glued in front of it."""
    if not line[:start].strip():
        return start  # nothing before it on the line: no row to have a root
    m = _GLUED_ROOT.match(line, start)
    return m.end() if m else start


def scan_log(text: str, known_hosts: set[str] | frozenset[str] = frozenset()
             ) -> tuple[NetEvidence, tuple[FatalError, ...], tuple[str, ...]]:
    """Evidence, fatal errors and warnings from any NCCL-bearing log (e.g. stdout beside -J)."""
    text = check_text(text, "NCCL log")
    scanner = LogScanner()
    for raw in text.splitlines():
        scanner.feed(strip_prefixes(raw))
    return scanner.evidence(), scanner.resolved_fatal_errors(set(known_hosts)), tuple(scanner.warnings)
