"""boto3 clients and the one place botocore errors become pdlift errors.

Clients are built per call site from a session (never at import time). Create calls run with SDK
retries off (``max_attempts=1``): botocore would otherwise retry capacity errors on its own, and
pdlift's own loop retries with the same ClientToken where that is right (docs/sources.md#sdk-retries-off).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import (BotoCoreError, ClientError, CredentialRetrievalError, EndpointConnectionError,
                                 HTTPClientError, IncompleteReadError, NoCredentialsError, NoRegionError,
                                 PartialCredentialsError)
from botocore.exceptions import ConnectionError as BotoConnectionError

from tasks.errors import (ApiThrottled, CapacityUnavailable, ConfigError, PdliftError, RemoteUnavailable,
                          RequestRejected, ResourceGone, StageFailed)
from tasks.planning.aws_errors import THROTTLING, Action, backoff_seconds, classify, fix_for

T = TypeVar("T")

DESCRIBE_CONFIG = Config(retries={"mode": "adaptive", "max_attempts": 8}, connect_timeout=10, read_timeout=60)
CREATE_CONFIG = Config(retries={"total_max_attempts": 1}, connect_timeout=10, read_timeout=60)


def session(region: str) -> boto3.session.Session:
    return boto3.session.Session(region_name=region)


def clients(sess: boto3.session.Session, service: str) -> tuple:
    """(describe client with adaptive retries, create client with SDK retries off)."""
    return sess.client(service, config=DESCRIBE_CONFIG), sess.client(service, config=CREATE_CONFIG)


def error_code(e: ClientError) -> str:
    """The AWS error code; the HTTP status when there is none (S3 answers a HEAD with a bare status)."""
    err = e.response.get("Error", {}).get("Code")
    return str(err or e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or "Unknown")


def translate(e: BaseException, what: str, zone: str | None = None) -> PdliftError:
    """Map a botocore exception (any service: EC2, EKS, S3, STS, SSM) to the project's tree, keeping
    the AWS code; never the credentials. The category of each code is ``tasks.planning.aws_errors``."""
    if isinstance(e, ClientError):
        code = error_code(e)
        message = e.response.get("Error", {}).get("Message", "")
        action = classify(code, message)
        text = f"{what}: {code}: {message}".rstrip(": ")
        if action is Action.RETRY:
            return ApiThrottled(text) if code in THROTTLING else RemoteUnavailable(text)
        if action in (Action.FAIL_OVER, Action.WAIT_START):  # no capacity here, or not yet
            return CapacityUnavailable(text, zone=zone, code=code)
        if action is Action.GONE:
            return ResourceGone(text)
        if action is Action.WAIT_SLOT:
            return CapacityUnavailable(text + " (reservation slots may still be freeing after a terminate)",
                                       zone=zone, code=code)
        if action is Action.FIX_INPUT:
            return ConfigError(f"{text}. Fix: {fix_for(code, message)}")
        return RequestRejected(f"{text}. Fix: {fix_for(code, message)}", code=code)
    if isinstance(e, (NoCredentialsError, PartialCredentialsError, CredentialRetrievalError)):
        return ConfigError(f"{what}: no usable AWS credentials ({type(e).__name__}); set a profile, an instance "
                           "role or the AWS_* environment")
    if isinstance(e, NoRegionError):
        return ConfigError(f"{what}: no AWS region; set aws.region in the blueprint or AWS_DEFAULT_REGION")
    if isinstance(e, EndpointConnectionError):
        return RemoteUnavailable(f"{what}: cannot reach the AWS endpoint ({e.kwargs.get('endpoint_url', '')})")
    if isinstance(e, (BotoConnectionError, HTTPClientError, IncompleteReadError, OSError)):
        return RemoteUnavailable(f"{what}: the AWS endpoint did not answer ({type(e).__name__})")
    if isinstance(e, BotoCoreError):  # e.g. a request botocore refuses to send (ParamValidationError)
        return StageFailed(f"{what}: {type(e).__name__}: {e}")
    raise TypeError(f"not a botocore error: {type(e).__name__}")


def call(fn: Callable[..., T], what: str, *, zone: str | None = None, attempts: int = 6,
         sleep: Callable[[float], None] = time.sleep, **params) -> T:
    """Call a boto3 method; retry throttling and server errors with the identical request.

    Capacity, quota and parameter errors are raised at once (translated). ``params`` are passed
    unchanged on every attempt, so a ClientToken makes the retries idempotent.
    """
    for attempt in range(attempts):
        try:
            return fn(**params)
        except (ClientError, BotoCoreError) as e:
            err = translate(e, what, zone)
            retryable = isinstance(err, (ApiThrottled, RemoteUnavailable))
            if not retryable or attempt == attempts - 1:
                raise err from e
            sleep(backoff_seconds(attempt, base=0.5, cap=20.0, jitter=random.random() * 0.25))
    raise AssertionError("unreachable")
