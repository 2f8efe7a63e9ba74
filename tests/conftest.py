"""Shared test set-up: loopback only, telemetry off, one Prefect test harness per session."""

import os

# Set before anything imports prefect or boto3: no telemetry, no real AWS, no real cluster.
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-2")
os.environ.pop("AWS_PROFILE", None)

# Fixture plugins; each component adds its module here.
pytest_plugins: list[str] = ["tests.fixtures.sandbox", "tests.fixtures.kube", "sandbox.engines.pytest_plugin",
                             "tests.fixtures.prefect_server", "tests.sandbox.bench.fixtures",
                             "tests.fixtures.postgres"]


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def prefect_harness():
    """One temporary Prefect API server and database for the whole session (Prefect's advice)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield
