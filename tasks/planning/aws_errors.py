"""What to do about an AWS error code (docs/sources.md#ec2-error-actions). Pure.

The adapter maps a botocore ClientError to one of these categories and raises the project's
exception for it; retries and AZ failover are decided on the category. The codes are EC2's own
list (API Reference, "Error codes for the Amazon EC2 API",
https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html). Only one code is
split by its message: ``Unsupported`` covers both an AZ that has constraints on the instance
type and a configuration EC2 does not support at all, and only the message tells them apart
(see ``unsupported_in_zone``).
"""

from __future__ import annotations

from enum import Enum


class Action(Enum):
    RETRY = "retry"            # throttling / transient server error: same request, same token, back off
    FIX_INPUT = "fix-input"    # the request names something that does not exist in the blueprint's account
    FAIL_OVER = "fail-over"    # no capacity here: block the AZ, try the next one
    WAIT_SLOT = "wait-slot"    # a reservation slot is still being cleaned up after a terminate
    WAIT_START = "wait"        # the Capacity Block has not begun yet: launch once it is active
    NEW_TOKEN = "new-token"    # the token's earlier request made instances that are terminated now
    DESCRIBE_AGAIN = "describe-again"  # the Capacity Block offering is gone: search the offerings again
    FAIL = "fail"              # quota, permissions or parameters: retrying cannot help
    GONE = "gone"              # the resource does not exist (treat deletes as done)


# CapacityBlockDescribeLimitExceeded: "You've reached the limit for this account" on
# DescribeCapacityBlockOfferings (EC2 error-code list); botocore does not count it as throttling,
# so pdlift's own loop backs off for it.
THROTTLING = {"RequestLimitExceeded", "Throttling", "ThrottlingException", "TooManyRequestsException",
              "SlowDown", "503 SlowDown",  # S3 answers SlowDown (503) when asked to back off
              "CapacityBlockDescribeLimitExceeded"}
SERVER = {"InternalError", "ServerInternal", "ServiceUnavailable", "Unavailable", "InternalFailure"}
# Codes that mean "no such thing": EC2's *.NotFound / *.Unknown, and S3's (a HEAD carries only the status).
MISSING = {"NoSuchKey", "NoSuchVersion", "NoSuchUpload", "NotFound", "404",
           "ResourceNotFoundException"}  # EKS, SSM and the other JSON APIs' "no such resource"
# Credentials and permissions: the operator's to fix (EC2, S3 and STS spell them differently).
ACCESS = {"UnauthorizedOperation", "AccessDenied", "AccessDeniedException", "InvalidAccessKeyId",
          "SignatureDoesNotMatch", "ExpiredToken", "InvalidClientTokenId", "403"}
# What names a resource in the blueprint that does not exist: fix the input.
WRONG_INPUT = {"NoSuchBucket"}
# InsufficientCapacity is EC2's code for import-instance requests (harmless here); a Capacity
# Block shortfall is InsufficientInstanceCapacity too: EC2's list has no Capacity-Block-only code.
CAPACITY = {"InsufficientInstanceCapacity", "InsufficientCapacity", "InsufficientReservedInstanceCapacity",
            "InsufficientHostCapacity"}
RESERVATION_FULL = {"ReservationCapacityExceeded"}
# "Your Capacity Block is not active yet."
NOT_STARTED = {"InvalidCapacityReservationState.PendingActivation"}
# "The request to launch an instance uses the same client token as a previous request for which
# the instance has been terminated."
TOKEN_SPENT = {"IdempotentInstanceTerminated"}
# "The Capacity Block offering ID is no longer available / cannot be found for this account /
# is malformed": offerings are quotes; a fresh DescribeCapacityBlockOfferings gives valid ids.
OFFERING_GONE = {"InvalidCapacityBlockOfferingIdExpired", "InvalidCapacityBlockOfferingIdNotFound",
                 "InvalidCapacityBlockOfferingIdMalformed"}
UNSUPPORTED = "Unsupported"
NOT_FOUND_SUFFIXES = (".NotFound", ".Unknown")

# The fix an operator needs, per code that is the operator's to fix.
FIXES = {
    "VcpuLimitExceeded": "ask AWS for a higher 'Running On-Demand P instances' vCPU quota "
                         "(192 vCPUs per p5en.48xlarge), or use a Capacity Block (not counted in that quota)",
    "MaxSpotInstanceCountExceeded": "raise the Spot instance quota",
    "InstanceLimitExceeded": "raise the instance quota for this type in the region",
    "UnauthorizedOperation": "grant the IAM permissions printed by `pdlift iam-policy`",
    "AccessDenied": "grant the IAM permissions printed by `pdlift iam-policy`",
    "AccessDeniedException": "grant the IAM permissions printed by `pdlift iam-policy`",
    "InvalidAccessKeyId": "check the AWS credentials (profile, role or AWS_* environment)",
    "SignatureDoesNotMatch": "check the AWS credentials (profile, role or AWS_* environment)",
    "ExpiredToken": "refresh the AWS credentials (the session token expired)",
    "InvalidClientTokenId": "check the AWS credentials (profile, role or AWS_* environment)",
    "403": "check the credentials and the bucket policy",
    "NoSuchBucket": "check the bucket in model.weights_uri: it does not exist in this account and region",
    "IdempotentParameterMismatch": "a request with this client token but other parameters was made before; "
                                   "use a new run id (--run-id) or tear the old run down",
    "IdempotentInstanceTerminated": "the instances this request's client token launched are terminated; "
                                    "pdlift launches again with a new token generation: re-run the stage",
    "InvalidCapacityReservationState.PendingActivation": "the Capacity Block has not started yet: launch "
                                                         "after its start date (migrate waits by itself)",
    "InvalidCapacityBlockOfferingIdExpired": "the offering expired before it was bought: re-run to search the "
                                             "offerings again",
    "InvalidCapacityBlockOfferingIdNotFound": "re-run to search the offerings again",
    "InvalidCapacityBlockOfferingIdMalformed": "re-run to search the offerings again",
    "InvalidParameterCombination": "fix the blueprint or the request shape named in the message",
    "InvalidParameterValue": "fix the value named in the message in the blueprint",
    "InvalidCapacityReservationId.NotFound": "the reservation id does not exist (expired?): fix "
                                             "aws.capacity.reservation_id",
    "InvalidCapacityReservationId.Malformed": "fix aws.capacity.reservation_id (cr-...)",
    "InvalidSubnetID.NotFound": "fix aws.subnets: that subnet does not exist in this region",
    "InvalidGroup.NotFound": "fix aws.security_group: that security group does not exist",
    "InvalidKeyPair.NotFound": "fix aws.ssh.key_pair or create the key pair",
    "InvalidAMIID.NotFound": "the AMI from the SSM parameter is not available in this region",
}
# "The requested configuration is currently not supported. Please check the documentation for
# supported configurations." names no parameter; these are the blueprint fields that shape it.
UNSUPPORTED_CONFIG_FIX = ("EC2 does not support this launch configuration: check aws.instance_type against the AMI "
                          "of aws.eks.ami_ssm_parameter (architecture, NVIDIA variant), and the network interfaces "
                          "and placement the instance type allows")


def unsupported_in_zone(message: str) -> bool:
    """Whether an ``Unsupported`` answer is EC2's AZ constraint ("Your requested instance type (X)
    is not supported in your requested Availability Zone (Z). Please retry your request by not
    specifying an Availability Zone or choosing ...") rather than an unsupported configuration
    ("The requested configuration is currently not supported ..."). Both wordings are EC2's, as
    the EC2 Auto Scaling troubleshooting guide quotes them
    (https://docs.aws.amazon.com/autoscaling/ec2/userguide/ts-as-instancelaunchfailure.html)."""
    return "availability zone" in message.lower()


def classify(code: str, message: str = "") -> Action:
    if code in THROTTLING or code in SERVER or (code.isdigit() and code.startswith("5")):
        return Action.RETRY
    if code in WRONG_INPUT:
        return Action.FIX_INPUT
    if code in MISSING:
        return Action.GONE
    if code in CAPACITY or (code == UNSUPPORTED and unsupported_in_zone(message)):
        return Action.FAIL_OVER
    if code in RESERVATION_FULL:
        return Action.WAIT_SLOT
    if code in NOT_STARTED:
        return Action.WAIT_START
    if code in TOKEN_SPENT:
        return Action.NEW_TOKEN
    if code in OFFERING_GONE:
        return Action.DESCRIBE_AGAIN
    if code.endswith(NOT_FOUND_SUFFIXES) and code not in FIXES:
        return Action.GONE
    return Action.FAIL


def fix_for(code: str, message: str = "") -> str:
    if code in FIXES:
        return FIXES[code]
    if code == UNSUPPORTED and not unsupported_in_zone(message):
        return UNSUPPORTED_CONFIG_FIX
    if code.endswith("LimitExceeded"):
        return "raise the quota named in the message (Service Quotas console)"
    return "see the AWS message; fix the blueprint or permissions and run again"


def backoff_seconds(attempt: int, base: float = 1.0, cap: float = 30.0, jitter: float = 0.0) -> float:
    """Exponential backoff for attempt 0, 1, 2, ...; ``jitter`` in [0, 1) is supplied by the caller."""
    return min(cap, base * (2 ** attempt)) * (1.0 + jitter)
