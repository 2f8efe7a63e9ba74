"""What the gate's outcome, and a person's answer to an INCONCLUSIVE one, mean for the candidate. Pure.

    PASS                           -> promote
    FAIL                           -> roll back
    INCONCLUSIVE + approved        -> promote
    INCONCLUSIVE + rejected        -> roll back
    INCONCLUSIVE + no answer       -> roll back (``timed_out``: the run is still paused)
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Decision:
    promote: bool
    text: str                 # for the log, the run's result and the rollback's reason
    timed_out: bool = False   # nobody answered within promotion.approval_timeout_s


def decide(outcome: str, approved: bool | None = None, why: str = "") -> Decision:
    if outcome != "INCONCLUSIVE":
        return Decision(outcome == "PASS", f"gate {outcome}")
    return Decision(bool(approved), f"gate INCONCLUSIVE, {why}", approved is None)


def rolled_back_message(deployment: str, colour: str, decision: Decision, deleted: list[str],
                        reasons: list[str], report: str) -> str:
    return (f"{deployment}: candidate {colour} rolled back ({decision.text}; deleted "
            f"{', '.join(deleted) or 'nothing'}): " + "; ".join(reasons[:5]) + f". Report: {report}")


def not_promoted_in_place_message(deployment: str, colour: str, decision: Decision, reasons: list[str],
                                  report: str) -> str:
    """A candidate updated in place (a rolling update of the live colour) is not deleted: the
    update reverts its roles from the snapshot."""
    return (f"{deployment}: the update of {colour} in place did not promote ({decision.text}); it is reverted to "
            "its snapshot: " + "; ".join(reasons[:5]) + f". Report: {report}")
