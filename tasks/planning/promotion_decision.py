"""What the gate's outcome, the blueprint's ``gate.undecided`` and a person's answer to an
INCONCLUSIVE one mean for the candidate. Pure.

    PASS                                  -> promote
    FAIL                                  -> roll back
    INCONCLUSIVE, undecided: rollback     -> roll back, nobody asked (not shown non-inferior within
                                             the budget; the reasons carry the figures)
    INCONCLUSIVE, undecided: ask
        approved                          -> promote
        rejected                          -> roll back
        no answer                         -> roll back (``timed_out``: the run is still paused)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Undecided = Literal["rollback", "ask"]  # blueprints.schema.GateSpec.undecided

NOT_SHOWN = ("gate INCONCLUSIVE: not shown non-inferior within its budget, and gate.undecided is rollback "
             "(undecided: ask would have a person decide)")


@dataclass(frozen=True)
class Decision:
    promote: bool
    text: str                 # for the log, the run's result and the rollback's reason
    timed_out: bool = False   # nobody answered within promotion.approval_timeout_s


def asks_a_person(outcome: str, undecided: Undecided) -> bool:
    """Whether the run waits for a person's answer before ``decide``: an INCONCLUSIVE gate whose
    blueprint says ``undecided: ask``, nothing else."""
    return outcome == "INCONCLUSIVE" and undecided == "ask"


def decide(outcome: str, undecided: Undecided, approved: bool | None = None, why: str = "") -> Decision:
    """``approved`` and ``why``: a person's answer (None: none in time); read only when
    ``asks_a_person``."""
    if outcome != "INCONCLUSIVE":
        return Decision(outcome == "PASS", f"gate {outcome}")
    if not asks_a_person(outcome, undecided):
        return Decision(False, NOT_SHOWN)
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


# A paired benchmark's other side named this is ``baseline.endpoint``, not a live colour.
PAIRED_ENDPOINT = "endpoint"


def paired_default(bp, in_place: bool, same_window: str, target: str | None) -> str:
    """What a benchmark run without an explicit pairing measures beside the candidate: the
    blueprint's ``baseline.endpoint`` (the service being replaced) when its gate is paired, and
    nothing for a rolling update in place, a same-window baseline or a ``--target`` measurement
    (their baselines come otherwise). The benchmark task drops the endpoint once the deployment
    was promoted (``tasks.benchmark._promoted_before``): the migration's cutover replaced it."""
    if bp.gate.paired is None or bp.baseline.endpoint is None or in_place or same_window or target:
        return ""
    return PAIRED_ENDPOINT
