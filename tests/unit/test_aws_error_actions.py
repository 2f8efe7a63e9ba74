"""What pdlift does about each AWS error (``tasks.planning.aws_errors``): HTTP status codes,
S3's and the JSON APIs' spellings, the operator's fix, and the backoff between retries."""

from __future__ import annotations

import pytest

from tasks.planning.aws_errors import FIXES, UNSUPPORTED_CONFIG_FIX, Action, backoff_seconds, classify, fix_for

GENERIC_FIX = "see the AWS message; fix the blueprint or permissions and run again"


@pytest.mark.parametrize("status", ["500", "502", "503", "504"])
def test_a_bare_5xx_status_is_retried(status):
    assert classify(status) is Action.RETRY


@pytest.mark.parametrize("status, action", [("404", Action.GONE), ("403", Action.FAIL), ("400", Action.FAIL),
                                            ("409", Action.FAIL), ("429", Action.FAIL)])
def test_a_bare_4xx_status_is_not_retried(status, action):
    assert classify(status) is action


@pytest.mark.parametrize("code", ["SlowDown", "503 SlowDown", "Throttling", "ThrottlingException",
                                  "TooManyRequestsException", "ServerInternal", "Unavailable", "InternalFailure"])
def test_throttling_and_server_errors_of_every_service_are_retried(code):
    assert classify(code) is Action.RETRY


@pytest.mark.parametrize("code", ["NoSuchKey", "NoSuchVersion", "NoSuchUpload", "NotFound",
                                  "ResourceNotFoundException"])
def test_no_such_thing_means_gone(code):
    assert classify(code) is Action.GONE


def test_a_missing_bucket_is_the_blueprints_to_fix_and_says_which_field():
    assert classify("NoSuchBucket") is Action.FIX_INPUT
    assert "model.weights_uri" in fix_for("NoSuchBucket")


@pytest.mark.parametrize("code", ["InsufficientCapacity", "InsufficientReservedInstanceCapacity",
                                  "InsufficientHostCapacity"])
def test_every_no_capacity_code_fails_over_to_the_next_zone(code):
    assert classify(code, "We currently do not have sufficient capacity") is Action.FAIL_OVER


def test_a_resource_named_in_the_blueprint_that_does_not_exist_fails_with_its_fix_not_as_gone():
    # a *.NotFound the operator must fix (the subnet in the blueprint) is no "already deleted"
    assert classify("InvalidSubnetID.NotFound") is Action.FAIL
    assert "aws.subnets" in fix_for("InvalidSubnetID.NotFound")
    assert classify("InvalidCapacityReservationId.NotFound") is Action.FAIL


def test_an_unknown_code_fails_with_the_generic_advice():
    assert classify("SomethingNew") is Action.FAIL
    assert fix_for("SomethingNew") == GENERIC_FIX


def test_a_quota_code_pdlift_has_no_fix_for_still_points_at_service_quotas():
    assert fix_for("NetworkInterfaceLimitExceeded") == "raise the quota named in the message (Service Quotas console)"


def test_every_listed_fix_is_given_for_its_own_code():
    for code, fix in FIXES.items():
        assert fix_for(code, "any message") == fix


def test_an_unsupported_availability_zone_gets_no_configuration_advice():
    in_zone = "Your requested instance type (p5en.48xlarge) is not supported in your requested Availability Zone"
    assert fix_for("Unsupported", in_zone) == GENERIC_FIX
    assert fix_for("Unsupported", "The requested configuration is currently not supported.") == UNSUPPORTED_CONFIG_FIX
    assert fix_for("Unsupported") == UNSUPPORTED_CONFIG_FIX


def test_an_availability_zone_message_is_recognised_whatever_its_case():
    assert classify("Unsupported", "NOT SUPPORTED IN YOUR REQUESTED AVAILABILITY ZONE (us-east-2c)") is Action.FAIL_OVER
    assert classify("Unsupported", "not supported in your requested availability zone") is Action.FAIL_OVER


def test_backoff_doubles_from_the_base_per_attempt():
    assert [backoff_seconds(a) for a in range(5)] == [1.0, 2.0, 4.0, 8.0, 16.0]
    assert [backoff_seconds(a, base=0.5) for a in range(3)] == [0.5, 1.0, 2.0]


def test_backoff_stops_growing_at_its_cap():
    assert backoff_seconds(5) == 30.0 and backoff_seconds(50) == 30.0
    assert backoff_seconds(3, cap=5.0) == 5.0


def test_jitter_stretches_the_wait_even_at_the_cap():
    assert backoff_seconds(0, jitter=0.5) == 1.5
    assert backoff_seconds(10, jitter=0.5) == 45.0
