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
# module fixtures are set up once). The files whose verdicts rest on a latency measured on this
# machine (a whole Prefect server with workers and a browser, the two-worker takeover and the
# redeploy after it, the benchmark-gated flows and bench commands) share one queue: run side by
# side on a 2-core machine they starve each other's measurements (a gate then FAILs on noise).
SERIAL = ("tests/e2e/test_browser.py", "tests/e2e/test_two_workers_takeover.py",
          "tests/flows/test_benchmark_gate.py", "tests/flows/test_recreate.py", "tests/flows/test_gate_resume.py",
          "tests/sandbox/bench/test_cli.py", "tests/sandbox/bench/test_benchmark_sequential.py")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadFileScheduling

    class FilesWithOneSerialQueue(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "measured-serially" if path in SERIAL else path

    return FilesWithOneSerialQueue(config, log)
