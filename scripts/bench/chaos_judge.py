"""The chaos bench's verdict on one trial, from what was observed (pure: tests/bench/test_chaos_judge.py).

Each invariant of the trial is one check here; ``judge`` returns the outcome and every
invariant the trial broke, each named with the numbers that broke it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Observed:
    final_state: str | None              # the last run's state type; None: it never ended
    final_message: str = ""
    verdict: str = ""                    # the gate report's outcome (PASS, FAIL, INCONCLUSIVE), "" without one
    promoted_colour: str | None = None   # what the run's ledger says it promoted
    logs: str = ""                       # the last run's log lines (its stages' too)
    reservations_created: int = 0        # CreateCapacityReservation for the run id that took effect
    fleet_nodes: int | None = None       # the ledger's fleet, once decided
    instances_running: int = 0
    weights_done_before_fault: bool = False
    weights_fetched: int | None = None   # the finished staging's bytes fetched; None: it never finished
    weights_total: int = 0
    verified_at_fault: int = 0           # bytes under final names on the run's nodes when the fault hit
    judged_at: float | None = None       # when the gate judged (epoch s, whole seconds)
    production_seen: dict[str, float] = field(default_factory=dict)  # colour production's Service selected -> first seen
    billing_after_teardown: tuple[str, ...] = ()
    teardown_error: str = ""
    namespaces_after_teardown: tuple[str, ...] = ()
    timeout_s: float = 0.0


@dataclass
class Judged:
    outcome: str
    violations: list[str] = field(default_factory=list)


def rolled_back(logs: str) -> bool:
    return "rolled back" in logs


def clean_failure(logs: str) -> bool:
    """The failure says what still bills per hour and how to tear it down (tasks.pipeline.report_failure)."""
    return "still billing $" in logs and "/h" in logs and "pdlift teardown" in logs


def judge(o: Observed) -> Judged:
    if o.final_state is None:
        out = Judged("stuck", [f"no end within {o.timeout_s:.0f} s"])
    elif o.promoted_colour is not None:
        out = Judged(f"converged: {o.verdict or '?'} -> promoted")
    elif o.verdict and rolled_back(o.logs):
        out = Judged(f"converged: {o.verdict} -> rolled back")
    elif o.final_state != "COMPLETED" and clean_failure(o.logs):
        out = Judged("clean failure")
    else:
        out = Judged(o.final_state.lower(), ["ended without a gate decision and without naming what bills and "
                                              f"the teardown: {o.final_message[:160]}"])
    decided = o.promoted_colour is not None
    if o.reservations_created > 1 or (decided and o.reservations_created != 1):
        out.violations.append(f"{o.reservations_created} capacity reservations for one run id")
    if decided and o.fleet_nodes != o.instances_running:
        out.violations.append(f"{o.instances_running} instances running for a fleet of {o.fleet_nodes} nodes")
    if o.weights_fetched is not None and not o.weights_done_before_fault \
            and o.weights_fetched > o.weights_total - o.verified_at_fault:
        out.violations.append(f"verified bytes fetched again: fetched {o.weights_fetched} of {o.weights_total}, "
                              f"{o.verified_at_fault} were verified when the fault hit")
    ungated = set(o.production_seen) - ({o.promoted_colour} if o.promoted_colour else set())
    if ungated:
        out.violations.append(f"production routed to {sorted(ungated)} without a passed gate")
    first = o.production_seen.get(o.promoted_colour or "")
    # judged_at has whole seconds: a promotion within the same second as the verdict is not early
    if first is not None and (o.judged_at is None or first < o.judged_at):
        out.violations.append(f"production routed to {o.promoted_colour} before its gate passed "
                              f"(seen {first:.1f}, judged {o.judged_at})")
    if o.billing_after_teardown or o.teardown_error:
        out.violations.append(f"after teardown still billing: {list(o.billing_after_teardown)} "
                              f"{o.teardown_error[-200:]}".rstrip())
    if o.namespaces_after_teardown:
        out.violations.append(f"namespaces left after teardown: {list(o.namespaces_after_teardown)}")
    return out
