"""A session stack is stopped after the last test that needs it (tests/fixtures/early_release.py),
where the process runs every collected test in order; its own teardown still runs at the end."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

pytest_plugins = ["pytester"]

SUITE = '''
from pathlib import Path

import pytest
from tests.fixtures.early_release import release_when_unused

LOG = Path("events.txt").resolve()  # in the run's own directory (xdist's workers print nothing)


class Events:
    def append(self, event):
        with LOG.open("a") as f:
            f.write(event + "\\n")


EVENTS = Events()


@pytest.fixture(scope="session")
def database(request):
    EVENTS.append("database up")
    release_when_unused(request, lambda: EVENTS.append("database released"))
    yield "db"
    EVENTS.append("database teardown")


@pytest.fixture(scope="session")
def server(database, request):
    EVENTS.append("server up")
    release_when_unused(request, lambda: EVENTS.append("server released"))
    yield "server"
    EVENTS.append("server teardown")


@pytest.fixture(scope="session")
def cache(request):
    EVENTS.append("cache up")
    release_when_unused(request, lambda: EVENTS.append("cache released"))
    yield "cache"


def test_a_uses_the_server(server):
    EVENTS.append("a")


def test_b_uses_the_database_only(database):
    EVENTS.append("b")


def test_c_uses_the_server_again(server, cache):
    EVENTS.append("c")


def test_d_needs_none_of_them():
    EVENTS.append("d")


def test_e_uses_the_cache(cache):
    EVENTS.append("e")

'''


def _events(pytester) -> list[str]:
    return (pytester.path / "events.txt").read_text().splitlines()


def _run(pytester, monkeypatch, *args: str):
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    pytester.makepyfile(test_suite=SUITE)
    return pytester.runpytest_subprocess("-p", "tests.fixtures.early_release", "-s", "-p", "no:cacheprovider", *args)


def test_a_stack_is_stopped_after_its_last_user_dependents_first_and_not_before(pytester, monkeypatch):
    result = _run(pytester, monkeypatch)
    result.assert_outcomes(passed=5)
    events = _events(pytester)
    # released after c (the server's and the database's last user), before d; the server, set up
    # after the database and needing it, first; the cache, whose last user is the last test, by the
    # session's teardown alone; then each fixture's own teardown, the second stop ``stop`` must bear
    assert events == ["database up", "server up", "a", "b", "cache up", "c",
                      "server released", "database released", "d", "e",
                      "server teardown", "database teardown"], events


def test_on_an_xdist_worker_nothing_is_released_before_the_session_ends(pytester, monkeypatch):
    result = _run(pytester, monkeypatch, "-n", "1", "--dist", "loadfile")
    result.assert_outcomes(passed=5)
    events = _events(pytester)
    assert [e for e in events if "released" in e] == [] and events[-2:] == ["server teardown", "database teardown"], events
