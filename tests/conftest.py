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


# scripts/test runs the suite on two pytest-xdist workers, a test file at a time on one worker (its
# module fixtures are set up once). The end-to-end files that each run a whole Prefect server with
# workers and a browser or a second worker share one queue: run side by side on a 2-core machine
# they starve each other's timing (the UI run, the lease takeover).
HEAVY_E2E = ("tests/e2e/test_browser.py", "tests/e2e/test_two_workers_takeover.py")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadFileScheduling

    class FilesWithOneHeavyQueue(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "heavy-e2e" if path in HEAVY_E2E else path

    return FilesWithOneHeavyQueue(config, log)
