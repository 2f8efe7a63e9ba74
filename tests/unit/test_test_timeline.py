"""The per-process timeline of scripts/test (tests/fixtures/timeline.py): when each test ran."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

pytest_plugins = ["pytester"]


def test_each_process_writes_when_each_test_ran_set_up_included(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    folder = pytester.mkdir("timeline")
    monkeypatch.setenv("PDLIFT_TEST_TIMELINE", str(folder))
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # set when this test runs on a worker
    pytester.makepyfile(test_t='''
import time
import pytest

@pytest.fixture(scope="module")
def slow():
    time.sleep(0.3)

def test_first(slow):
    pass

def test_second(slow):
    time.sleep(0.1)
''')
    result = pytester.runpytest_subprocess("-p", "tests.fixtures.timeline", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    (written,) = folder.iterdir()
    assert written.name.startswith("timeline-main-") and written.name.endswith(".tsv")
    rows = [line.split("\t") for line in written.read_text().splitlines()]
    assert [r[2] for r in rows] == ["test_t.py::test_first", "test_t.py::test_second"]
    (s1, e1), (s2, e2) = [(float(r[0]), float(r[1])) for r in rows]
    assert e1 - s1 >= 0.3 and 0.1 <= e2 - s2 < 0.3  # the module's set-up is the first test's
    assert s1 <= e1 <= s2 <= e2


def test_without_the_variable_nothing_is_written(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.delenv("PDLIFT_TEST_TIMELINE", raising=False)
    pytester.makepyfile(test_t="def test_it():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "tests.fixtures.timeline", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert not list(pytester.path.rglob("timeline-*.tsv"))
