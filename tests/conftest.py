"""Shared test set-up: loopback only, telemetry off, one Prefect test harness per session."""

import os
from pathlib import Path

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
                             "tests.fixtures.postgres", "tests.fixtures.early_release",
                             "tests.fixtures.timeline"]


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def prefect_harness():
    """One temporary Prefect API server and database for the whole session (Prefect's advice),
    the database a copy of a migrated one (tests/fixtures/prefect_server.py, ``seeded_database``):
    the harness's server would otherwise run every migration before it answers (22 s here, not 5.6).
    The harness makes its database directory with ``mkdtemp`` and names the file in it; it is given
    a directory that already holds that file."""
    import tempfile
    from unittest import mock

    from prefect.testing import utilities

    from tests.fixtures.prefect_server import seeded_database

    directory = tempfile.mkdtemp(prefix="pdlift-harness-")
    seeded_database(Path(directory) / "prefect-test.db")
    with mock.patch.object(utilities, "mkdtemp", return_value=directory), \
            utilities.prefect_test_harness(server_startup_timeout=120):
        yield


def pytest_collection_modifyitems(config, items):
    """The lanes of scripts/test (tests/lanes.py): exact tests carry the marker ``exact``, measured
    ones ``measured``; long modules first (a stable sort keeps each module's order)."""
    from tests import lanes

    for item in items:
        if lanes.is_exact(item.nodeid):
            item.add_marker(pytest.mark.exact)
        elif lanes.is_measured(item.nodeid) and not item.get_closest_marker("exact"):
            item.add_marker(pytest.mark.measured)
    items.sort(key=lambda item: lanes.order_key(item.nodeid))


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup`` sends each group of tests/lanes.py (a module, or the modules that share
    a costly stack) to one worker. Grouped here, by node id, and not with ``xdist_group`` markers:
    pytest 9.2's structured node ids silently undo the suffix xdist 3.8 gives marked tests, so the
    marks group nothing (pytest-dev/pytest-xdist#1386, open)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    from tests import lanes

    class LaneScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return lanes.group_of(nodeid)

    return LaneScheduling(config, log)
