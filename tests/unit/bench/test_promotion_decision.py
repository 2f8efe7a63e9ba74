"""The gate's outcome, the blueprint's gate.undecided and a person's answer, read as promote or roll back."""

import pytest

from tasks.planning.promotion_decision import Decision, asks_a_person, decide, rolled_back_message

CHOICES = ("rollback", "ask")


@pytest.mark.parametrize("undecided", CHOICES)
def test_pass_promotes_and_fail_rolls_back_whatever_the_gate_does_with_an_undecided_candidate(undecided):
    assert decide("PASS", undecided) == Decision(True, "gate PASS")
    assert decide("FAIL", undecided) == Decision(False, "gate FAIL")
    assert not asks_a_person("PASS", undecided) and not asks_a_person("FAIL", undecided)


def test_an_inconclusive_gate_rolls_back_without_asking_anyone_when_undecided_is_rollback():
    assert not asks_a_person("INCONCLUSIVE", "rollback")
    decision = decide("INCONCLUSIVE", "rollback")
    assert decision.promote is False and decision.timed_out is False  # a decision, not an unanswered pause
    assert decision.text.startswith("gate INCONCLUSIVE: not shown non-inferior within its budget")
    assert "gate.undecided is rollback" in decision.text and "undecided: ask" in decision.text
    # nobody was asked, so no answer can turn it into a promotion
    assert decide("INCONCLUSIVE", "rollback", True, "approved by a person") == decision


def test_an_inconclusive_gate_follows_the_person_and_no_answer_rolls_back_when_undecided_is_ask():
    assert asks_a_person("INCONCLUSIVE", "ask")
    assert decide("INCONCLUSIVE", "ask", True, "approved by a person") == Decision(
        True, "gate INCONCLUSIVE, approved by a person")
    rejected = decide("INCONCLUSIVE", "ask", False, "rejected by a person")
    assert rejected == Decision(False, "gate INCONCLUSIVE, rejected by a person")
    timed_out = decide("INCONCLUSIVE", "ask", None, "no decision within 3 s")
    assert timed_out == Decision(False, "gate INCONCLUSIVE, no decision within 3 s", timed_out=True)


def test_the_rollback_message_names_what_went_and_why():
    text = rolled_back_message("bg1", "green", decide("FAIL", "rollback"), [], ["tpot_mean 1.2x"], "/r/gate.json")
    assert text == "bg1: candidate green rolled back (gate FAIL; deleted nothing): tpot_mean 1.2x. Report: /r/gate.json"


def test_an_undecided_rollback_message_carries_the_reason_and_the_figures_a_person_would_need():
    reasons = ["short c4: ttft_mean 1.04x (95% upper bound 1.18x > 1.10), not shown non-inferior"]
    text = rolled_back_message("bg1", "green", decide("INCONCLUSIVE", "rollback"), ["Namespace bg1-green"], reasons,
                               "/r/gate.json")
    assert text.startswith("bg1: candidate green rolled back (gate INCONCLUSIVE: not shown non-inferior within its "
                           "budget")
    assert "deleted Namespace bg1-green" in text and reasons[0] in text and text.endswith("Report: /r/gate.json")


def test_a_benchmark_pairs_with_the_old_service_only_when_the_gate_is_paired_and_names_it():
    from types import SimpleNamespace

    from tasks.planning.promotion_decision import PAIRED_ENDPOINT, paired_default

    def bp(paired: bool, endpoint: bool):
        return SimpleNamespace(gate=SimpleNamespace(paired=object() if paired else None),
                               baseline=SimpleNamespace(endpoint=object() if endpoint else None))

    assert paired_default(bp(True, True), False, "", None) == PAIRED_ENDPOINT
    assert paired_default(bp(False, True), False, "", None) == ""          # an unpaired gate
    assert paired_default(bp(True, False), False, "", None) == ""          # nothing to pair with
    assert paired_default(bp(True, True), True, "", None) == ""            # a rolling update in place
    assert paired_default(bp(True, True), False, "runs/d/r/bench-baseline", None) == ""
    assert paired_default(bp(True, True), False, "", "http://127.0.0.1:8000") == ""   # --target
