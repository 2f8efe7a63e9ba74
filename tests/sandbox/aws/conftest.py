"""Fixtures for the AWS endpoint's own tests: a fresh endpoint per test, boto3 clients with
parameter validation on and retries off (so each error reaches the test as EC2 sent it)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from sandbox.aws import AwsEndpoint, start_in_thread
from sandbox.aws.config import AwsConfig
from tests.sandbox.aws.fake_nodes import FakeNodeManager
from tests.sandbox.aws.helpers import NO_RETRIES, admin

REGION = "us-east-2"


@pytest.fixture(scope="session")
def boto_session() -> boto3.session.Session:
    # One session: its loader caches the service models, so each client is cheap.
    return boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing",
                                 region_name=REGION)


@pytest.fixture
def aws_config() -> AwsConfig:
    """Override in a module (or parametrize) to run the endpoint with other settings."""
    return AwsConfig(reservation_pending_seconds=0.0)


@pytest.fixture(scope="session")
def _endpoints(tmp_path_factory) -> Iterator[dict[str, AwsEndpoint]]:
    """One endpoint per distinct configuration, kept for the session (a stop costs ~1 s)."""
    running: dict[str, AwsEndpoint] = {}
    yield running
    for endpoint in running.values():
        endpoint.stop()


@pytest.fixture
def aws(tmp_path_factory, aws_config: AwsConfig,
        _endpoints: dict[str, AwsEndpoint]) -> AwsEndpoint:
    key = repr(aws_config)
    if key not in _endpoints:
        state = tmp_path_factory.mktemp("aws-state")
        _endpoints[key] = start_in_thread(
            state, config=aws_config, node_manager=FakeNodeManager(state, "127.0.0.11", 2222))
    endpoint = _endpoints[key]
    # Start every test from an empty account, no faults, no nodes (moto's state is per process,
    # so this also clears whatever an endpoint with another configuration left there).
    admin(endpoint, "POST", "/__sandbox/reset")
    kube_file = endpoint.state_dir / "sandbox" / "kube" / "endpoint.json"
    kube_file.unlink(missing_ok=True)
    return endpoint


@pytest.fixture
def ec2(aws: AwsEndpoint, boto_session: boto3.session.Session) -> Any:
    return boto_session.client("ec2", endpoint_url=aws.url, config=NO_RETRIES)
