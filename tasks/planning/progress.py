"""Progress of the stages that take minutes (fabric, launch, deploy): whole units done of units planned.

Each stage counts in units of its own, planned before the work starts: the fabric stage in nodes
per layer, pair rounds and nccl tests (``tasks.planning.fabric.plan``), the launch stage in
instances running and joined, the deploy stage in pods Ready per role. A ``Count`` is one such
tally; ``total`` adds tallies up; ``percent`` is what the progress artifacts and the CLI's bar
show. Pure: the Prefect calls are the task wrappers' (``tasks.progress``).
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass


def percent(done: int, planned: int) -> float:
    """``done`` of ``planned`` in percent, rounded down to 0.1: 100.0 only once every planned unit is
    done (999 of 1000 is 99.9, not 100.0), never above 100, never below 0. Nothing planned is
    nothing left to do: 100.0."""
    if planned <= 0:
        return 100.0
    done = max(0, min(done, planned))
    return (1000 * done // planned) / 10


@dataclass(frozen=True)
class Count:
    name: str
    done: int
    planned: int

    @property
    def percent(self) -> float:
        return percent(self.done, self.planned)


def total(counts: Sequence[Count], name: str = "total") -> Count:
    """All tallies as one (each capped at its plan: one part's surplus never fills another's gap)."""
    return Count(name, sum(min(max(c.done, 0), c.planned) for c in counts), sum(max(c.planned, 0) for c in counts))


def render_bar(title: str, counts: Sequence[Count], width: int = 30) -> str:
    """One terminal line: the stage's total as a bar, then each tally as done/planned."""
    t = total(counts)
    filled = int(width * t.percent / 100)
    parts = ", ".join(f"{c.name} {c.done}/{c.planned}" for c in counts)
    return f"{title} [{'#' * filled}{'-' * (width - filled)}] {t.percent:5.1f}% {parts}"


class Tally:
    """Units done of units planned per part, over batches of work (the fabric stage's passes).

    ``begin`` starts a batch with its plan and drops what the previous batch left undone (a pass
    that stopped early never runs its later layers); ``plan`` sets a part's units in the current
    batch once the part knows them exactly, ``add`` plans more (a second pass over suspect
    pairs). Each part's ``Count`` is over all batches. Ticked from worker threads.
    """

    def __init__(self, parts: Sequence[str]):
        self.parts = tuple(parts)
        self._lock = threading.Lock()
        self._past = dict.fromkeys(self.parts, 0)  # units done in finished batches
        self._planned = dict.fromkeys(self.parts, 0)
        self._done = dict.fromkeys(self.parts, 0)

    def begin(self, planned: Mapping[str, int]) -> None:
        unknown = set(planned) - set(self.parts)
        if unknown:
            raise ValueError(f"no such part(s): {', '.join(sorted(unknown))}")
        with self._lock:
            for p in self.parts:
                self._past[p] += min(self._done[p], self._planned[p])
                self._done[p], self._planned[p] = 0, max(0, planned.get(p, 0))

    def plan(self, part: str, units: int) -> None:
        with self._lock:
            self._planned[part] = max(0, units)

    def add(self, part: str, units: int) -> None:
        with self._lock:
            self._planned[part] += max(0, units)

    def tick(self, part: str, units: int = 1) -> None:
        with self._lock:
            self._done[part] += units

    def counts(self) -> list[Count]:
        with self._lock:
            return [Count(p, self._past[p] + min(self._done[p], self._planned[p]), self._past[p] + self._planned[p])
                    for p in self.parts]


def gang_counts(size: int, states: Mapping[str, str], joined: Collection[str]) -> list[Count]:
    """The launch stage's units: the gang's instances running, and running and joined to the cluster
    (``states``: instance -> EC2 state as last described; an instance replaced stops counting once
    EC2 says it is no longer running, and its successor counts from its own start)."""
    running = {i for i, state in states.items() if state == "running"}
    return [Count("running", min(len(running), size), size),
            Count("joined", min(len(running & set(joined)), size), size)]


def ready_counts(expected: Mapping[str, int], ready: Mapping[str, int]) -> list[Count]:
    """The deploy stage's units: pods Ready per role (prefill, decode, router) of those it must run."""
    return [Count(role, min(ready.get(role, 0), want), want) for role, want in expected.items()]
