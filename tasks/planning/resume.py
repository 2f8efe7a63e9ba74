"""When a migrate run is re-run with the same run id: is a stage the ledger calls done still done?

A stage is skipped only if what it made is still there, as observed now:
- reserve: its reservation is active or pending, or a Capacity Block scheduled to begin;
- launch, fabric, weights: every node of the run's current fleet is running (fabric and weights
  were done on exactly those nodes; a replaced or stopped node needs them again), and the fabric
  verdict passed (a failed one is recorded for the fleet it leaves, not as done);
- deploy: the fleet is intact and the candidate colour it brought up still exists (a gate FAIL,
  a rejection or a hand rollback deletes it, and the next attempt must deploy again), and it is
  still a candidate: a colour that is live now was promoted, so it counts only if this run's
  own benchmark stage promoted it (a re-run of a finished run has nothing left to do);
- benchmark: only when it promoted the deployed colour and that colour is still live.

A run whose Capacity Block has not begun waits for it before the launch (``capacity_wait``): it
frees its worker and resumes at the block's StartDate (``flows/pipeline.py``).

Redeploys and rollouts reuse the fleet's run id for new work: they name the stages to run again
(``rerun``), which are never skipped. Only a leading run of stages is skipped: once one stage runs
again (a new reservation, new nodes), every later one runs again too, since it was done on what
was just replaced.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tasks.planning.ledger import Ledger, hourly_burn, parse_time

RESERVED_STATES = ("active", "pending", "scheduled")


@dataclass(frozen=True)
class Observed:
    reservation_state: str | None = None     # of the reservation the ledger names
    running: frozenset[str] = frozenset()   # launched instance ids that are running
    candidate_present: bool = False          # the deployed colour's router and namespace exist
    live_colour: str | None = None           # the colour the production Service selects


def launched_ids(ledger: Ledger) -> list[str]:
    fleet = ledger.fleet()
    return fleet.instance_ids() if fleet else []


def reservation_id(ledger: Ledger) -> str | None:
    reserved = ledger.reserved()
    return reserved.reservation_id if reserved else None


def deployed_colour(ledger: Ledger) -> str | None:
    deployed = ledger.deployed()
    return deployed.colour if deployed else None


def promoted_colour(ledger: Ledger) -> str | None:
    gate = ledger.gate()
    return gate.promotion.colour if gate and gate.outcome == "promoted" and gate.promotion else None


def still_done(stage: str, ledger: Ledger, observed: Observed) -> bool:
    if stage not in ledger.stages_done:
        return False
    if stage == "reserve":
        return bool(reservation_id(ledger)) and observed.reservation_state in RESERVED_STATES
    ids = launched_ids(ledger)
    fleet_intact = bool(ids) and observed.running == frozenset(ids)
    if stage == "fabric":
        return fleet_intact and ledger.records["fabric"].passed  # type: ignore[union-attr]
    if stage in ("launch", "weights"):
        return fleet_intact
    colour = deployed_colour(ledger)
    promoted_here = bool(colour) and promoted_colour(ledger) == colour
    if stage == "deploy":
        still_candidate = colour != observed.live_colour or promoted_here
        return fleet_intact and bool(colour) and observed.candidate_present and still_candidate
    if stage == "benchmark":
        return fleet_intact and observed.candidate_present and promoted_here and observed.live_colour == colour
    return False


def leading_done(wanted: Iterable[str], rerun: Iterable[str], is_done: Callable[[str], bool]) -> list[str]:
    """The stages to skip: those at the start of ``wanted`` that are still done and not to be rerun.
    ``is_done`` is asked in order, and no further than the first stage that must run."""
    again = set(rerun)
    skip = []
    for stage in wanted:
        if stage in again or not is_done(stage):
            break
        skip.append(stage)
    return skip


@dataclass(frozen=True)
class CapacityWait:
    """A run's Capacity Block begins later: what the run waits for, and what it costs meanwhile."""

    reservation_id: str
    starts_at: dt.datetime
    ends_at: str
    upfront_usd: float      # already paid for the block
    hourly_usd: float       # what the run's live resources bill per hour while it waits
    seconds: float          # from now until the start

    def markdown(self, deployment: str, run_id: str, how: str) -> str:
        hours, rest = divmod(int(self.seconds), 3600)
        return "\n".join([
            f"## Run {run_id} of {deployment} waits for its Capacity Block", "",
            f"- Capacity Block `{self.reservation_id}` begins at **{_fmt(self.starts_at)}** "
            f"(in {hours} h {rest // 60} min) and ends at {self.ends_at or 'its EndDate'}.",
            f"- The run resumes at {_fmt(self.starts_at)}: {how}",
            f"- Cost meanwhile: ${self.upfront_usd:,.2f} paid upfront for the block (it cannot be cancelled); "
            f"${self.hourly_usd:,.2f}/h for everything else the run holds.",
            "- EC2 refuses launches into a block before its start (InvalidCapacityReservationState."
            "PendingActivation); the launch follows the start.", ""])


def capacity_wait(ledger: Ledger, now: dt.datetime) -> CapacityWait | None:
    """The wait before the launch, when the run's reservation is a Capacity Block that begins
    after ``now``; None when it has begun (a start at ``now`` is no wait) or there is none."""
    reserved = ledger.reserved()
    if reserved is None or not reserved.capacity_block or not reserved.starts_at:
        return None
    start = parse_time(reserved.starts_at)
    if start <= now:
        return None
    upfront = sum(e.upfront_usd for e in ledger.entries if e.resource_id == reserved.reservation_id)
    return CapacityWait(reserved.reservation_id, start, reserved.ends_at, upfront, hourly_burn(ledger),
                        (start - now).total_seconds())


def _fmt(t: dt.datetime) -> str:
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
