"""The gate's outcome and a person's answer, read as promote or roll back."""

from tasks.planning.promotion_decision import Decision, decide, rolled_back_message


def test_pass_promotes_and_fail_rolls_back():
    assert decide("PASS") == Decision(True, "gate PASS")
    assert decide("FAIL") == Decision(False, "gate FAIL")


def test_an_inconclusive_gate_follows_the_person_and_no_answer_rolls_back():
    assert decide("INCONCLUSIVE", True, "approved by a person") == Decision(
        True, "gate INCONCLUSIVE, approved by a person")
    assert decide("INCONCLUSIVE", False, "rejected by a person").promote is False
    timed_out = decide("INCONCLUSIVE", None, "no decision within 3 s")
    assert not timed_out.promote and timed_out.timed_out


def test_the_rollback_message_names_what_went_and_why():
    text = rolled_back_message("bg1", "green", decide("FAIL"), [], ["tpot_mean 1.2x"], "/r/gate.json")
    assert text == "bg1: candidate green rolled back (gate FAIL; deleted nothing): tpot_mean 1.2x. Report: /r/gate.json"
