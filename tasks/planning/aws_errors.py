"""What to do about an AWS error code (docs/sources.md#ec2-error-actions). Pure.

The adapter maps a botocore ClientError to one of these categories and raises the project's
exception for it; retries and AZ failover are decided on the category, never on message text.
"""

from __future__ import annotations

from enum import Enum


class Action(Enum):
    RETRY = "retry"            # throttling / transient server error: same request, same token, back off
    FIX_INPUT = "fix-input"    # the request names something that does not exist in the blueprint's account
    FAIL_OVER = "fail-over"    # no capacity here: block the AZ, try the next one
    WAIT_SLOT = "wait-slot"    # a reservation slot is still being cleaned up after a terminate
    FAIL = "fail"              # quota, permissions or parameters: retrying cannot help
    GONE = "gone"              # the resource does not exist (treat deletes as done)


THROTTLING = {"RequestLimitExceeded", "Throttling", "ThrottlingException", "TooManyRequestsException",
              "SlowDown", "503 SlowDown"}  # S3 answers SlowDown (503) when asked to back off
SERVER = {"InternalError", "ServerInternal", "ServiceUnavailable", "Unavailable", "InternalFailure"}
# Codes that mean "no such thing": EC2's *.NotFound / *.Unknown, and S3's (a HEAD carries only the status).
MISSING = {"NoSuchKey", "NoSuchVersion", "NoSuchUpload", "NotFound", "404",
           "ResourceNotFoundException"}  # EKS, SSM and the other JSON APIs' "no such resource"
# Credentials and permissions: the operator's to fix (EC2, S3 and STS spell them differently).
ACCESS = {"UnauthorizedOperation", "AccessDenied", "AccessDeniedException", "InvalidAccessKeyId",
          "SignatureDoesNotMatch", "ExpiredToken", "InvalidClientTokenId", "403"}
# What names a resource in the blueprint that does not exist: fix the input.
WRONG_INPUT = {"NoSuchBucket"}
CAPACITY = {"InsufficientInstanceCapacity", "InsufficientCapacity", "InsufficientReservedInstanceCapacity",
            "InsufficientHostCapacity", "Unsupported", "InsufficientCapacityBlockCapacity"}
RESERVATION_FULL = {"ReservationCapacityExceeded"}
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


def classify(code: str) -> Action:
    if code in THROTTLING or code in SERVER or (code.isdigit() and code.startswith("5")):
        return Action.RETRY
    if code in WRONG_INPUT:
        return Action.FIX_INPUT
    if code in MISSING:
        return Action.GONE
    if code in CAPACITY:
        return Action.FAIL_OVER
    if code in RESERVATION_FULL:
        return Action.WAIT_SLOT
    if code.endswith(NOT_FOUND_SUFFIXES) and code not in FIXES:
        return Action.GONE
    return Action.FAIL


def fix_for(code: str) -> str:
    if code in FIXES:
        return FIXES[code]
    if code.endswith("LimitExceeded"):
        return "raise the quota named in the message (Service Quotas console)"
    return "see the AWS message; fix the blueprint or permissions and run again"


def backoff_seconds(attempt: int, base: float = 1.0, cap: float = 30.0, jitter: float = 0.0) -> float:
    """Exponential backoff for attempt 0, 1, 2, ...; ``jitter`` in [0, 1) is supplied by the caller."""
    return min(cap, base * (2 ** attempt)) * (1.0 + jitter)
