"""The ``fleet`` strategy's bookkeeping: the second fleet's run id, where a cut-off swap stands,
which run holds the fleet now, and what running two fleets at once cost. Pure.

A fleet swap builds a second fleet through the existing stages under a run id of its own, linked
to the live one (``successor_run_id``: ``<run>-f1``, then ``-f2``, ...), brings the candidate up on
it, gates it against the live colour measured in the same window, switches production to it,
then releases the first fleet. The live run's ledger carries a ``Handover`` record from before
the second fleet's first request to the end, so a re-run after a crash knows where it stood
(``next_step``), and an update of the live run id after the swap goes to the run that holds the
fleet now (``current_run_id``).

Sources: ``../shared/reference/fleet-updates.md`` (C. fleet: SageMaker "provisions a new fleet";
SkyServe switches "only when all new replicas are ready"; teardown of blue in a ``finally``).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from tasks.planning.ledger import TOKEN_GENERATION, Ledger, parse_time
from tasks.planning.records import Handover

_SUFFIX = re.compile(r"-f(\d+)$")
MAX_CHAIN = 1000  # successors followed at most (a ledger edited into a cycle stops here)

Step = Literal["none", "build", "settle", "abandon"]
Settle = Literal["release", "abandon", "stop"]


def _split(run_id: str) -> tuple[str, int]:
    found = _SUFFIX.search(run_id)
    return (run_id[:found.start()], int(found.group(1))) if found else (run_id, 0)


def successor_run_id(run_id: str) -> str:
    """The run id of the fleet that replaces ``run_id``'s: ``r1`` -> ``r1-f1`` -> ``r1-f2``."""
    base, number = _split(run_id)
    return f"{base}-f{number + 1}"


def descends_from(run_id: str, ancestor: str) -> bool:
    """Whether ``run_id`` is ``ancestor`` or a fleet that replaced it (by the linked ids' form):
    a sweep told ``ancestor`` is active keeps those, since production may run on any of them."""
    (base, number), (root, start) = _split(run_id), _split(ancestor)
    return base == root and number >= start


def successors(run_id: str, handover_of: Callable[[str], Handover | None]) -> list[str]:
    """The runs whose fleets replaced, or were to replace, ``run_id``'s, in order (whatever
    became of them): what a teardown of ``run_id`` releases besides its own."""
    out, seen = [], {run_id}
    while (handover := handover_of(run_id)) is not None and handover.successor not in seen and len(out) < MAX_CHAIN:
        run_id = handover.successor
        seen.add(run_id)
        out.append(run_id)
    return out


def next_step(handover: Handover | None, production_colour: str | None, successor_torn_down: bool = False) -> Step:
    """What an update of a fleet does first about an earlier swap of it:

    none     no swap, or one that ended: released, abandoned, or a second fleet someone tore
             down by hand before its switch
    build    cut off before its switch (production still on the old colour): go on with the same
             second fleet, which its own ledger resumes
    settle   production was switched (recorded, or made just before a crash could record it):
             ``settle_action`` says whether the first fleet goes or the second
    abandon  cut off while giving the second fleet up: finish releasing it
    """
    if handover is None or handover.phase in ("released", "abandoned"):
        return "none"
    if handover.phase == "abandoning":
        return "abandon"
    if handover.phase == "switched":
        return "settle"
    # Building: a second fleet torn down by hand is gone, whatever production routes to since
    # (another strategy may have moved it to the colour the swap would have used).
    if successor_torn_down:
        return "none"
    return "settle" if production_colour == handover.colour else "build"


def torn_down(successor: Ledger | None) -> bool:
    """Whether a second fleet's run was torn down (by hand: ``pdlift teardown``) with nothing left."""
    return successor is not None and "teardown" in successor.records and not successor.live()


def settle_action(handover: Handover, production_colour: str | None, previous_answers: bool = True) -> Settle:
    """After the switch, which fleet goes, by what production routes to now:

    release  the candidate (on the second fleet): the first fleet goes
    abandon  the previous colour again (someone switched back in the keep window): the second goes,
             provided the previous colour still answers (``previous_answers``)
    stop     neither colour, the previous one without answering engines, or production cannot
             be read: nothing is released or deleted; a person decides
    """
    if production_colour == handover.colour:
        return "release"
    if production_colour == handover.previous_colour and previous_answers:
        return "abandon"
    return "stop"


def current_run_id(run_id: str, handover_of: Callable[[str], Handover | None]) -> str:
    """The run that holds the fleet now: ``run_id``, or the run its released swaps handed it to."""
    seen = {run_id}
    for _ in range(MAX_CHAIN):
        handover = handover_of(run_id)
        if handover is None or handover.phase != "released":
            return run_id
        run_id = handover.successor
        if run_id in seen:
            raise ValueError(f"run {run_id}'s fleet handovers form a cycle; inspect with `pdlift state show`")
        seen.add(run_id)
    raise ValueError(f"more than {MAX_CHAIN} fleet handovers from run {run_id}")


@dataclass(frozen=True)
class Overlap:
    """Two fleets billing at once: the first fleet's time and cost after the second began to bill."""

    hours: float
    usd: float


def _billing(ledger: Ledger):
    return [e for e in ledger.entries if e.kind != TOKEN_GENERATION and e.started_at
            and (e.usd_per_hour or e.upfront_usd)]


def overlap(first: Ledger, second: Ledger, now: dt.datetime) -> Overlap:
    """The extra fleet-hours of a swap: how long, and at what cost, the first fleet billed once the
    second one's first resource did (an ODCR bills from its creation, used or not)."""
    began = [parse_time(e.started_at) for e in _billing(second)]
    if not began:
        return Overlap(0.0, 0.0)
    start = min(began)
    hours = usd = 0.0
    for e in _billing(first):
        end = parse_time(e.ended_at) if e.ended_at else now
        span = max(0.0, (end - max(start, parse_time(e.started_at))).total_seconds() / 3600)
        hours = max(hours, span)
        usd += span * e.usd_per_hour
    return Overlap(round(hours, 4), round(usd, 2))
