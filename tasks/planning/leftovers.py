"""Which candidate colours a deployment has left up with nobody left to decide on them. Pure.

A candidate waits for its run's gate: promoted, rolled back, or (INCONCLUSIVE) a person's answer.
Two ends leave it up with no pdlift code left to delete it:
- a ``benchmark-gate`` deployment run suspended for approval whose timeout passes is failed by
  Prefect's pause-expiration service ("The flow was paused and never resumed."), with none of its
  code running;
- a worker lost between a gate FAIL and its rollback.

Its engines then hold GPUs of a fleet billing by the hour, so the leak sweep deletes such a
candidate. Deleting engines someone still needs is worse than a leak, so a colour is a leftover
only when all of these hold:
- production routes to the other colour, or there is no production Service at all. A Service
  that selects no colour is a recreate's maintenance, whose update owns both colours;
- its namespace is not kept as the switch-back colour (``pdlift.io/kept-until`` in the future);
- no fleet update of the deployment is unsettled;
- no run of the deployment is in flight. Prefect must say that each run's flow run has ended:
  a suspended run is Paused, not ended, and a run Prefect cannot answer for counts as in flight;
- the run that deployed the colour had its gate decide against it (FAIL, or INCONCLUSIVE with
  no approval within ``promotion.approval_timeout_s`` of the verdict with ``gate.undecided: ask``;
  at once with ``rollback``), or promoted it before
  production moved on (a replaced colour whose retirement never finished, past its keep window).
  A candidate whose run never reached a verdict, or passed and was not promoted yet, is reported
  and kept: re-triggering that run continues at its gate.

Every colour that is not live is reported, with why it is a leftover or why it is kept.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"  # the ledger's, gate.json's judged_at and the kept-until annotation's


def parse_time(text: str | None) -> dt.datetime | None:
    try:
        return dt.datetime.strptime(text or "", TIME_FORMAT).replace(tzinfo=dt.timezone.utc)
    except ValueError:
        return None


@dataclass(frozen=True)
class RunSeen:
    """A run of the deployment, as its ledger, lease, gate report and Prefect tell it."""

    run_id: str
    flow_run_id: str = ""              # the lease's holder ("" without a lease: no flow ever took it)
    ended: bool | None = None          # Prefect's word on that flow run; None: it cannot say
    lease_expired: bool = True         # also true for a lease its holder gave up
    lease_until: str = ""
    deployed_colour: str | None = None
    verdict: str = ""                  # its gate report's outcome; "" without one
    judged_at: dt.datetime | None = None
    judged_colour: str | None = None   # the colour its gate report judged (None in reports before it said)
    promoted_colour: str | None = None  # what its ledger says it promoted
    handover_open: bool = False        # a fleet update of its fleet neither released nor abandoned
    named_active: bool = False         # the operator named it active (``--active-run``)

    def busy(self) -> str:
        """Why this run may still act on a colour; "" when it cannot."""
        if self.named_active:
            return f"run {self.run_id} is named active"
        if not self.flow_run_id or self.ended is True:
            return ""
        if self.ended is None:
            return f"Prefect cannot say whether run {self.run_id}'s flow run {self.flow_run_id} has ended"
        if self.lease_expired:  # with no run heartbeats, a flow run whose worker died stays Running
            return (f"run {self.run_id}'s flow run {self.flow_run_id} has not ended, but its lease expired at "
                    f"{self.lease_until}: if its worker is gone, mark that flow run crashed")
        return f"run {self.run_id} is in flight (flow run {self.flow_run_id})"


@dataclass(frozen=True)
class ColourSeen:
    namespace: str
    kept_until: dt.datetime | None = None


@dataclass(frozen=True)
class Candidate:
    deployment: str
    colour: str
    namespace: str
    leftover: bool        # True: delete it (with apply); False: kept, for ``why``
    why: str


def judge_candidates(deployment: str, service_present: bool, live: str | None, present: dict[str, ColourSeen],
                     runs: list[RunSeen], now: dt.datetime, approval_timeout_s: float) -> list[Candidate]:
    """``present``: the colours whose namespace exists (and is not being deleted). ``runs``:
    oldest first; the newest run that deployed a colour owns it."""
    out = []
    for colour, seen in sorted(present.items()):
        if colour == live:
            continue
        leftover, why = _judge(colour, seen, service_present, live, runs, now, approval_timeout_s)
        out.append(Candidate(deployment, colour, seen.namespace, leftover, why))
    return out


def _judge(colour: str, seen: ColourSeen, service_present: bool, live: str | None, runs: list[RunSeen],
           now: dt.datetime, approval_timeout_s: float) -> tuple[bool, str]:
    if service_present and live is None:
        return False, "production's Service selects no colour (a recreate's maintenance): its update owns both colours"
    if seen.kept_until and seen.kept_until > now:
        return False, f"kept as the switch-back colour until {seen.kept_until.strftime(TIME_FORMAT)}"
    unsettled = [r.run_id for r in runs if r.handover_open]
    if unsettled:
        return False, f"a fleet update of run {unsettled[0]} has not settled: it owns both colours"
    busy = [why for why in (r.busy() for r in runs) if why]
    if busy:
        return False, busy[0]
    owner = next((r for r in reversed(runs) if colour in (r.deployed_colour, r.judged_colour)), None)
    if owner is None:
        return False, "no run deployed or judged this colour: delete it by hand if nobody needs it"
    if owner.judged_colour not in (None, colour):  # its latest verdict is about its other colour
        return False, (f"run {owner.run_id} deployed it and its gate has not decided on it; re-trigger that run, "
                       f"or delete it with `pdlift rollback BLUEPRINT {colour}`")
    routes = f"production routes to {live}" if live else "there is no production Service"
    if owner.promoted_colour == colour:
        return True, f"run {owner.run_id} promoted it, and since then {routes}: its retirement never finished"
    if owner.verdict == "FAIL":
        return True, f"run {owner.run_id}'s gate FAILed it and its rollback never ran; {routes}"
    if owner.verdict == "INCONCLUSIVE" and owner.judged_at is not None and \
            now >= owner.judged_at + dt.timedelta(seconds=approval_timeout_s):
        if approval_timeout_s <= 0:   # gate.undecided: rollback, a decision like a FAIL
            return True, (f"run {owner.run_id}'s gate was INCONCLUSIVE at {owner.judged_at.strftime(TIME_FORMAT)} "
                          f"(gate.undecided: rollback) and its rollback never ran; {routes}")
        return True, (f"run {owner.run_id}'s gate was INCONCLUSIVE at {owner.judged_at.strftime(TIME_FORMAT)} and "
                      f"nobody approved within {approval_timeout_s:g} s; {routes}")
    return False, (f"run {owner.run_id} deployed it and its gate has not decided (verdict: {owner.verdict or 'none'}); "
                   f"re-trigger that run to continue at its gate, or delete it with `pdlift rollback BLUEPRINT {colour}`")
