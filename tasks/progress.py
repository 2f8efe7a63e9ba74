"""Progress artifacts of the stages that take minutes (fabric, launch, deploy), and the CLI's bar.

A stage procedure reports ``Count``s (``tasks.planning.progress``): units done of units planned,
per part. ``StageProgress`` makes them Prefect progress artifacts, one per part that plans
something and one in total, keyed as the weights stage keys its own (``<deployment>-<stage>-<part>``,
``<deployment>-<stage>-total``), each described with its count; and hands every snapshot to the
listeners of this process (``progress_listener``: the CLI's progress bar).

A progress report never fails a stage: it runs inside the stage's own polls (the launch's wait
for its instances, whose failure terminates the gang), so an error of the Prefect API or of a
listener is logged once, as a warning, and the stage goes on.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Generic, TypeVar

from prefect import get_run_logger
from prefect.artifacts import create_progress_artifact, update_progress_artifact

from tasks.planning.identity import artifact_key
from tasks.planning.progress import Count, total

F = TypeVar("F", bound=Callable)
Listener = Callable[[str, list[Count]], None]  # (stage, counts)


class Listeners(Generic[F]):
    """The callbacks of this process that want a kind of progress (the CLI's bars), each for as
    long as its ``listening`` block runs; a stage takes a ``snapshot`` when it starts."""

    def __init__(self) -> None:
        self._fns: list[F] = []

    @contextlib.contextmanager
    def listening(self, fn: F) -> Iterator[None]:
        self._fns.append(fn)
        try:
            yield
        finally:
            self._fns.remove(fn)

    def snapshot(self) -> list[F]:
        return list(self._fns)


_listeners: Listeners[Listener] = Listeners()
TOTAL = "total"


def progress_listener(fn: Listener) -> contextlib.AbstractContextManager[None]:
    """Call ``fn(stage, counts)`` on every progress report of a stage in this process (the CLI's bar)."""
    return _listeners.listening(fn)


def _logger() -> logging.Logger | logging.LoggerAdapter:
    """The task run's logger (the warning shows in the run's logs), this module's outside a run."""
    try:
        return get_run_logger()
    except Exception:  # MissingContextError: no run here
        return logging.getLogger(__name__)


class StageProgress:
    """One stage's progress artifacts, updated when a count changes, at most every
    ``min_interval_s`` unless the report is final.

    A part's artifact is made at the first report in which it plans something (on the reporting
    thread): a part a stage has nothing for (the whole-set test of two nodes, the pairs of one)
    gets none, and counts 0 of 0 in the total. When the Prefect API fails a call, the report is
    dropped, the first failure is logged, and no artifact is sent again for ``retry_after_s``
    (a final report tries once more): an API that is down costs the stage one timeout per
    ``retry_after_s``, not one per poll."""

    def __init__(self, deployment: str, stage: str, units: Mapping[str, str] | None = None,
                 unit: str = "units done", min_interval_s: float = 2.0, retry_after_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic):
        self.deployment, self.stage, self.min_interval_s = deployment, stage, min_interval_s
        self.retry_after_s, self._clock = retry_after_s, clock
        # What a part's units are, for its description (part -> "pods Ready"; ``unit`` otherwise).
        self.units, self.unit = dict(units or {}), unit
        self._listeners = _listeners.snapshot()
        self._lock = threading.Lock()
        self._ids: dict[str, object] = {}
        self._sent: dict[str, tuple[tuple[int, int], float]] = {}  # part -> (count sent, when)
        self._last: list[Count] = []
        self._quiet_until = float("-inf")  # after a failed API call: no artifact call before then
        self._warned: set[str] = set()

    def key(self, part: str) -> str:
        return artifact_key(self.deployment, self.stage, part)

    def __call__(self, counts: list[Count], final: bool = False) -> None:
        """Never raises: a report that cannot be sent is a warning in the run's log, not a failed stage."""
        with self._lock:
            self._last = list(counts)
            for listener in self._listeners:
                try:
                    listener(self.stage, self._last)
                except Exception as e:
                    name = getattr(listener, "__qualname__", type(listener).__qualname__)
                    self._warn(f"listener {id(listener)}", f"{self.stage} progress listener {name} failed "
                                                          f"({type(e).__name__}: {e}); the stage goes on")
            self._send(force=final)

    def flush(self) -> None:
        """Send the last report as it stands (on the way out of a stage, failed or not). Never
        raises, as no report does: the stage's own error is the one to see."""
        with self._lock:
            if self._last:
                self._send(force=True)

    def _describe(self, c: Count) -> str:
        return f"{self.stage} {c.name}: {c.done} of {c.planned} {self.units.get(c.name, self.unit)}"

    def _warn(self, what: str, message: str) -> None:
        if what not in self._warned:
            self._warned.add(what)
            _logger().warning(message)

    def _send(self, force: bool) -> None:
        now = self._clock()
        if now < self._quiet_until and not force:
            return
        for c in self._last + [total(self._last, TOTAL)]:
            if c.name not in self._ids and c.planned <= 0 and c.name != TOTAL:
                continue  # nothing planned for this part (yet): no artifact at 100% "0 of 0"
            sent, at = self._sent.get(c.name, (None, 0.0))
            try:
                if c.name not in self._ids:
                    self._ids[c.name] = create_progress_artifact(c.percent, key=self.key(c.name),
                                                                 description=self._describe(c))
                elif (c.done, c.planned) != sent and (force or now - at >= self.min_interval_s):
                    update_progress_artifact(self._ids[c.name], c.percent, description=self._describe(c))
                else:
                    continue
            except Exception as e:
                self._quiet_until = now + self.retry_after_s
                self._warn("artifacts", f"progress artifact {self.key(c.name)} not sent ({type(e).__name__}: {e}); "
                                        f"the {self.stage} stage goes on, its progress artifacts may lag behind")
                return
            self._sent[c.name] = ((c.done, c.planned), now)
