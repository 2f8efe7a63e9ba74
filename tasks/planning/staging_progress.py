"""Weight staging progress: the stager's JSON lines, aggregated per node and in total.

The on-node stager prints one JSON object per line (``scripts/node/stage_weights.py``):
``start``, ``progress`` (bytes done, bytes fetched, files, rate), ``file`` (one staged file),
``error`` (key, reason, detail) and ``done``. Anything else on stdout is ignored, so a noisy
login banner cannot break staging. The board is fed from many SSH reader threads at once.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field, replace



@dataclass(frozen=True)
class NodeError:
    key: str | None
    reason: str
    detail: str

    def render(self) -> str:
        where = f"{self.key}: " if self.key else ""
        return f"{where}{self.reason}" + (f" ({self.detail})" if self.detail else "")


@dataclass(frozen=True)
class NodeProgress:
    node: str
    bytes_total: int = 0
    bytes_done: int = 0
    bytes_fetched: int = 0
    files_total: int = 0
    files_done: int = 0
    rate_bps: float = 0.0
    seconds: float = 0.0
    state: str = "waiting"
    errors: tuple[NodeError, ...] = field(default=())

    @property
    def percent(self) -> float:
        return 100.0 * self.bytes_done / self.bytes_total if self.bytes_total else 0.0


def parse_event(line: str) -> dict | None:
    """One stager line as a dict with an ``event`` field, or None for anything else."""
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) and isinstance(event.get("event"), str) else None


class ProgressBoard:
    """Thread-safe per-node progress; ``version`` changes whenever anything does."""

    def __init__(self, nodes: list[str], bytes_total: int, files_total: int):
        self._lock = threading.Lock()
        self._nodes = {n: NodeProgress(n, bytes_total=bytes_total, files_total=files_total) for n in nodes}
        self.version = 0

    def feed(self, node: str, line: str) -> dict | None:
        event = parse_event(line)
        if event is None:
            return None
        with self._lock:
            self._nodes[node] = _apply(self._nodes[node], event)
            self.version += 1
        return event

    def fail(self, node: str, reason: str, detail: str = "") -> None:
        """Mark a node failed for a reason outside the stager (unreachable, killed, timed out)."""
        with self._lock:
            cur = self._nodes[node]
            errors = cur.errors if cur.errors else (NodeError(None, reason, detail),)
            self._nodes[node] = replace(cur, state="failed", errors=errors)
            self.version += 1

    def snapshot(self) -> list[NodeProgress]:
        with self._lock:
            return list(self._nodes.values())


def _apply(cur: NodeProgress, ev: dict) -> NodeProgress:
    kind = ev["event"]
    num = lambda name, default: _number(ev.get(name), default)  # noqa: E731
    if kind in ("start", "progress", "done"):
        cur = replace(cur, state="staging" if kind != "done" else "done",
                      bytes_total=int(num("bytes_total", cur.bytes_total)),
                      files_total=int(num("files_total", cur.files_total)),
                      bytes_done=int(num("bytes_done", cur.bytes_done)),
                      bytes_fetched=int(num("bytes_fetched", cur.bytes_fetched)),
                      files_done=int(num("files_done", cur.files_done)),
                      rate_bps=float(num("rate_bps", cur.rate_bps)),
                      seconds=float(num("elapsed_s", cur.seconds)))
    elif kind == "error":
        err = NodeError(_text(ev.get("key")) or None, _text(ev.get("reason")) or "error",
                        _text(ev.get("detail")))
        cur = replace(cur, state="failed", errors=cur.errors + (err,))
    return cur


def _number(value: object, default: float) -> float:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def _text(value: object, limit: int = 300) -> str:
    return value[:limit] if isinstance(value, str) else ""


def total(snapshot: list[NodeProgress]) -> NodeProgress:
    """All nodes as one: sums of bytes and files, summed rate, slowest node's time."""
    state = ("failed" if any(p.state == "failed" for p in snapshot) else
             "done" if snapshot and all(p.state == "done" for p in snapshot) else
             "staging" if any(p.state != "waiting" for p in snapshot) else "waiting")
    return NodeProgress(
        "total", sum(p.bytes_total for p in snapshot), sum(p.bytes_done for p in snapshot),
        sum(p.bytes_fetched for p in snapshot), sum(p.files_total for p in snapshot),
        sum(p.files_done for p in snapshot), sum(p.rate_bps for p in snapshot if p.state == "staging")
        or sum(p.rate_bps for p in snapshot), max((p.seconds for p in snapshot), default=0.0), state)


def throughput_rows(snapshot: list[NodeProgress]) -> list[dict]:
    """The per-node throughput table (one row per node, then the total)."""
    rows = []
    for p in snapshot + [total(snapshot)]:
        rows.append({"node": p.node, "state": p.state, "files": f"{p.files_done}/{p.files_total}",
                     "staged_gb": round(p.bytes_done / 1e9, 3), "fetched_gb": round(p.bytes_fetched / 1e9, 3),
                     "seconds": round(p.seconds, 1), "mb_per_s": round(p.rate_bps / 1e6, 1),
                     "error": "; ".join(e.render() for e in p.errors)})
    return rows


def failure_message(snapshot: list[NodeProgress]) -> str:
    """One line per failed node: node, key and reason, as the stage's error message."""
    lines = [f"{p.node}: " + "; ".join(e.render() for e in p.errors[:3])
             for p in snapshot if p.state == "failed"]
    return "weight staging failed on {} node(s):\n  {}".format(len(lines), "\n  ".join(lines))


def render_bar(snapshot: list[NodeProgress], width: int = 30) -> str:
    """A one-line terminal progress bar for all nodes together."""
    t = total(snapshot)
    filled = int(width * t.percent / 100)
    done = sum(p.state == "done" for p in snapshot)
    failed = sum(p.state == "failed" for p in snapshot)
    tail = f", {failed} failed" if failed else ""
    return (f"[{'#' * filled}{'-' * (width - filled)}] {t.percent:5.1f}% "
            f"{t.bytes_done / 1e9:.2f}/{t.bytes_total / 1e9:.2f} GB {t.rate_bps / 1e6:7.1f} MB/s "
            f"nodes {done}/{len(snapshot)} done{tail}")
