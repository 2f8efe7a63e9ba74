"""Time, injected: the stages' clock and the one bounded wait they all use.

Tests hand a stage a ``Clock`` whose sleep does nothing (or is counted), so a 15-minute wait of
real EC2 runs in microseconds against a fake, and the bounds themselves can be pinned.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from tasks.errors import NotReadyYet

T = TypeVar("T")


@dataclass(frozen=True)
class Clock:
    now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.timezone.utc)
    sleep: Callable[[float], None] = time.sleep
    monotonic: Callable[[], float] = time.monotonic


def poll_until(probe: Callable[[], T | None], *, bound_s: float, clock: Clock = Clock(), interval_s: float = 2.0,
               max_interval_s: float | None = None, what: str | Callable[[], str] = "the condition") -> T:
    """Call ``probe`` until it returns something other than None or False, and return that.

    The probe is asked at once, then after every ``interval_s`` (doubling up to
    ``max_interval_s`` when that is given). When ``bound_s`` has passed after an answer that is
    not yet good, raises ``NotReadyYet(what)``; ``what`` may be a callable, evaluated then, to
    name what is still missing. A probe raises to end the wait early (a state that will never
    converge, such as an instance that stopped)."""
    deadline = clock.monotonic() + bound_s
    delay = interval_s
    while True:
        value = probe()
        if value is not None and value is not False:
            return value
        if clock.monotonic() >= deadline:
            raise NotReadyYet(what() if callable(what) else what)
        clock.sleep(delay)
        if max_interval_s is not None:
            delay = min(delay * 2, max_interval_s)
