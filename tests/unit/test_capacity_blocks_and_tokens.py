"""Capacity Blocks and client tokens, the pure parts: EC2's error codes and what each means, the
durations EC2 sells (checked at `pdlift validate`), the wait before a block begins, token
generations and the EndDate of a reservation made again. Every decision boundary is pinned."""

import datetime as dt
from pathlib import Path

import botocore.session
import pytest
from botocore.exceptions import ClientError

from blueprints.loader import load_blueprint, parse_blueprint
from blueprints.rules import capacity_block_hours_valid
from tasks.adapters import aws_client
from tasks.errors import BlueprintError, CapacityUnavailable, RequestRejected
from tasks.planning import ec2_requests as req
from tasks.planning import identity
from tasks.planning import ledger as ledger_plan
from tasks.planning.aws_errors import UNSUPPORTED_CONFIG_FIX, Action, classify, fix_for
from tasks.planning.identity import Generation, RunIdentity
from tasks.planning.ledger import Ledger, LedgerEntry, now_str
from tasks.planning.records import Reserved
from tasks.planning.resume import Observed, capacity_wait, still_done
from tasks.stages import reserve as reserve_stage

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "blueprints" / "glm51-fp8-2p2d.yaml"
T0 = dt.datetime(2026, 12, 1, 9, 0, 0, tzinfo=dt.timezone.utc)
# The two wordings of EC2's Unsupported (EC2 Auto Scaling troubleshooting guide quotes both).
IN_ZONE = ("Your requested instance type (p5en.48xlarge) is not supported in your requested Availability Zone "
           "(us-east-2c). Please retry your request by not specifying an Availability Zone or choosing us-east-2a.")
CONFIG = ("The requested configuration is currently not supported. Please check the documentation for supported "
          "configurations.")


# --- EC2's error codes --------------------------------------------------------------------


@pytest.mark.parametrize("code, action", [
    ("InvalidCapacityReservationState.PendingActivation", Action.WAIT_START),
    ("IdempotentInstanceTerminated", Action.NEW_TOKEN),
    ("InvalidCapacityBlockOfferingIdExpired", Action.DESCRIBE_AGAIN),
    ("InvalidCapacityBlockOfferingIdNotFound", Action.DESCRIBE_AGAIN),
    ("InvalidCapacityBlockOfferingIdMalformed", Action.DESCRIBE_AGAIN),
    ("CapacityBlockDescribeLimitExceeded", Action.RETRY),
    ("InsufficientCapacityBlockCapacity", Action.FAIL),  # no such code in EC2's list: nothing special
])
def test_each_capacity_block_and_token_code_means_what_ec2_documents(code, action):
    assert classify(code, "whatever EC2 said") is action


def test_unsupported_fails_over_for_an_az_constraint_and_fails_fast_naming_fields_for_a_configuration():
    assert classify("Unsupported", IN_ZONE) is Action.FAIL_OVER
    assert classify("Unsupported", CONFIG) is Action.FAIL
    assert classify("Unsupported") is Action.FAIL  # no message: never the misleading "no capacity in any AZ"
    assert fix_for("Unsupported", CONFIG) == UNSUPPORTED_CONFIG_FIX
    assert "aws.instance_type" in UNSUPPORTED_CONFIG_FIX and "aws.eks.ami_ssm_parameter" in UNSUPPORTED_CONFIG_FIX


def _error(code: str, message: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": 400}},
                       "RunInstances")


def test_the_adapter_turns_each_into_the_error_its_caller_acts_on():
    in_zone = aws_client.translate(_error("Unsupported", IN_ZONE), "RunInstances", "us-east-2c")
    config = aws_client.translate(_error("Unsupported", CONFIG), "RunInstances")
    early = aws_client.translate(_error("InvalidCapacityReservationState.PendingActivation",
                                        "Your Capacity Block is not active yet."), "RunInstances")
    spent = aws_client.translate(_error("IdempotentInstanceTerminated", "..."), "RunInstances")

    assert type(in_zone) is CapacityUnavailable and in_zone.zone == "us-east-2c"
    assert type(config) is RequestRejected and UNSUPPORTED_CONFIG_FIX in str(config)
    assert type(early) is CapacityUnavailable and early.code == "InvalidCapacityReservationState.PendingActivation"
    assert type(spent) is RequestRejected and spent.code == "IdempotentInstanceTerminated"


# --- durations, at `pdlift validate` ---------------------------------------------------------


@pytest.mark.parametrize("hours, ok", [(6, False), (24, True), (48, True), (335, False), (336, True),
                                       (337, False), (360, False), (503, False), (504, True), (672, True),
                                       (4368, True), (4375, False), (4536, False)])
def test_capacity_block_lengths_are_24_hour_steps_to_336_then_168_hour_steps_to_4368(hours, ok):
    assert capacity_block_hours_valid(hours) is ok


def _block_blueprint(hours: int) -> str:
    text = REFERENCE.read_text()
    old = "    mode: odcr\n    duration_hours: 48\n    max_hourly_usd: 260\n    max_upfront_usd: 0\n"
    assert old in text
    return text.replace(old, f"    mode: capacity-block\n    duration_hours: {hours}\n    max_hourly_usd: 260\n"
                             "    max_upfront_usd: 100000\n")


def test_validate_names_file_line_field_and_the_nearest_lengths_for_a_length_ec2_does_not_sell():
    with pytest.raises(BlueprintError) as info:
        parse_blueprint(_block_blueprint(337), "bp.yaml")
    (problem,) = [p for p in info.value.problems if p.field == "aws.capacity.duration_hours"]
    line = next(i for i, text in enumerate(_block_blueprint(337).splitlines(), 1) if "duration_hours" in text)
    assert problem.render().startswith(f"bp.yaml:{line}:")
    assert "337 h is not sold" in problem.message and problem.hint == "set duration_hours to 336 or 504"
    with pytest.raises(BlueprintError) as too_long:
        parse_blueprint(_block_blueprint(4375), "bp.yaml")
    assert "set duration_hours to 4368" in str(too_long.value)
    parse_blueprint(_block_blueprint(504), "bp.yaml")  # 3 weeks: sold


# --- the wait before a block begins ---------------------------------------------------------


def _ledger(starts: dt.datetime, block: bool = True) -> Ledger:
    reserved = Reserved("cr-0123456789abcdef0", "us-east-2a", None, block, (), False, now_str(starts),
                        now_str(starts + dt.timedelta(days=2)))
    fee = LedgerEntry("capacity-block", "cr-0123456789abcdef0", "reserve", "us-east-2a", 0.0, 8306.0, now_str(T0))
    return Ledger("d", "r1", now_str(T0), (fee,)).with_record(reserved)


def test_a_block_that_begins_after_now_is_waited_for_and_one_that_begins_now_is_not():
    wait = capacity_wait(_ledger(T0 + dt.timedelta(seconds=1)), T0)
    assert wait is not None and wait.seconds == 1.0 and wait.upfront_usd == 8306.0
    assert capacity_wait(_ledger(T0), T0) is None                       # StartDate == now: launch
    assert capacity_wait(_ledger(T0 - dt.timedelta(seconds=1)), T0) is None
    assert capacity_wait(_ledger(T0 + dt.timedelta(hours=5), block=False), T0) is None  # an ODCR is usable at once


def test_the_wait_note_says_when_the_run_resumes_and_what_it_costs():
    text = capacity_wait(_ledger(T0 + dt.timedelta(hours=3, minutes=12)), T0).markdown("d", "r1", "rescheduled")
    assert "begins at **2026-12-01T12:12:00Z** (in 3 h 12 min)" in text
    assert "resumes at 2026-12-01T12:12:00Z: rescheduled" in text and "$8,306.00 paid upfront" in text


def test_a_scheduled_block_counts_as_reserved_when_a_run_resumes():
    ledger = _ledger(T0 + dt.timedelta(hours=1))
    assert still_done("reserve", ledger, Observed(reservation_state="scheduled"))
    assert not still_done("reserve", ledger, Observed(reservation_state="cancelled"))


# --- token generations --------------------------------------------------------------------


@pytest.fixture(scope="module")
def bp():
    return load_blueprint(REFERENCE)


def test_generation_0_keeps_todays_tokens_and_each_later_one_is_new():
    run = RunIdentity("d", "r1", T0, 72)
    assert identity.client_token(run, "launch", "lt-1", 4, "attempt-0", 0) == \
        identity.client_token(run, "launch", "lt-1", 4, "attempt-0")
    tokens = {identity.client_token(run, "launch", "lt-1", 4, "attempt-0", g) for g in range(3)}
    assert len(tokens) == 3 and all(len(t) <= 64 for t in tokens)


def test_a_reservation_made_again_ends_duration_hours_after_its_generation_began(bp):
    run = RunIdentity(bp.name, "r1", T0, 72)
    later = Generation(1, T0 + dt.timedelta(days=3, minutes=20))
    first = req.capacity_reservation_request(bp, run, "us-east-2a", None)
    again = req.capacity_reservation_request(bp, run, "us-east-2a", None, later)
    assert first["EndDate"] == T0 + dt.timedelta(hours=48 + 1)
    assert again["EndDate"] == T0 + dt.timedelta(days=3, hours=48 + 1)
    assert again["ClientToken"] != first["ClientToken"]
    assert again == req.capacity_reservation_request(bp, run, "us-east-2a", None, later)  # a retry: identical


def test_the_ledger_keeps_the_latest_generation_per_request_as_no_resource(bp):
    ledger = Ledger("d", "r1", now_str(T0))
    for g in (Generation(1, T0), Generation(2, T0 + dt.timedelta(hours=1))):
        ledger = ledger.with_entry(ledger_plan.generation_entry("reserve", g, "reserve", "why"))
    ledger = ledger.with_entry(ledger_plan.generation_entry("launch", Generation(1, T0), "launch", "why"))
    again = Ledger.from_dict(ledger.to_dict())

    assert ledger_plan.generations(again) == {"reserve": Generation(2, T0 + dt.timedelta(hours=1)),
                                              "launch": Generation(1, T0)}
    assert again.live() == [] and ledger_plan.hourly_burn(again) == 0
    assert "client-token" not in ledger_plan.render_markdown(again, T0)


@pytest.mark.parametrize("elapsed, short", [
    (dt.timedelta(hours=1), False),                               # a retry soon after: the same request
    (dt.timedelta(hours=2), False),                               # exactly duration - 1 h left
    (dt.timedelta(hours=2, seconds=1), True),                     # less than that: reserve again from now
    (dt.timedelta(days=3), True),                                 # the EndDate is long past
])
def test_a_reservation_is_made_again_from_now_once_it_would_hold_an_hour_less_than_asked(bp, elapsed, short):
    run = RunIdentity(bp.name, "r1", T0, 72)  # T0 is on the hour: EndDate = T0 + 48 h + 1 h
    assert reserve_stage._ends_short(bp, run, Generation(), T0 + elapsed) is short


# --- the NIC layout reads a field the EC2 model has ----------------------------------------


def test_network_card_interface_types_is_in_the_ec2_model_and_a_card_without_efa_only_gets_no_efa():
    card = botocore.session.get_session().get_service_model("ec2").shape_for("NetworkCardInfo")
    assert "InterfaceTypes" in card.members
    info = {"EfaInfo": {"MaximumEfaInterfaces": 2},
            "NetworkCards": [{"NetworkCardIndex": 0, "InterfaceTypes": ["interface", "efa-only"]},
                             {"NetworkCardIndex": 1, "InterfaceTypes": ["interface"]},
                             {"NetworkCardIndex": 2}]}  # older answers omit it: the documented layout
    efa = [n["NetworkCardIndex"] for n in req.network_interfaces(info, "s", "g") if n["InterfaceType"] == "efa-only"]
    assert efa == [0, 2]
