"""The other lane's queue (tests/lanes.py OTHER_LANE_PLACES) and the per-process timeline
(tests/fixtures/timeline.py) that shows when each unit ran."""

from __future__ import annotations

from pathlib import Path

from tests import lanes

REPO = Path(__file__).resolve().parents[2]
CHAOS, DEMO = "tests/e2e/test_chaos_slice.py", "tests/e2e/test_demo.py"

pytest_plugins = ["pytester"]


def _units(n: int) -> list[str]:
    return [f"tests/unit/test_{i:03d}.py" for i in range(n)]


def test_the_chaos_slice_goes_first_and_the_demo_to_its_place_the_rest_in_xdists_order():
    units = _units(60)
    queue = lanes.other_lane_queue([*units[:30], DEMO, *units[30:], CHAOS])
    assert queue[0] == CHAOS
    assert queue.index(DEMO) == lanes.OTHER_LANE_PLACES[DEMO] == 40
    assert [u for u in queue if u not in (CHAOS, DEMO)] == units  # nothing else moved
    assert len(queue) == 62


def test_a_short_queue_takes_a_place_past_its_end_as_its_end_and_a_missing_unit_is_not_added():
    units = _units(5)
    assert lanes.other_lane_queue([DEMO, *units]) == [*units, DEMO]
    assert lanes.other_lane_queue([*units, CHAOS]) == [CHAOS, *units]
    assert lanes.other_lane_queue(units) == units


def test_xdist_hands_the_units_out_in_that_order(pytester, monkeypatch):
    """tests/conftest.py's scheduler, on one worker: units run in the queue's order."""
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.setattr(lanes, "OTHER_LANE_PLACES", {})  # not seen by the subprocess: it reads the file
    e2e = pytester.mkdir("tests").joinpath("e2e")
    e2e.mkdir()
    log = pytester.path / "order.txt"
    body = f"def test_it():\n    open({str(log)!r}, 'a').write(__name__ + '\\n')\n"
    e2e.joinpath("test_chaos_slice.py").write_text(body)
    e2e.joinpath("test_demo.py").write_text(body + body.replace("test_it", "test_two"))
    e2e.joinpath("test_many.py").write_text("".join(body.replace("test_it", f"test_{i}") for i in range(3)))
    pytester.makeconftest(f"exec(open({str(REPO / 'tests' / 'conftest.py')!r}).read())")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "1", "--dist", "loadgroup",
                                           "-p", "xdist", "tests")
    result.assert_outcomes(passed=6)
    # xdist alone: many (3 tests), demo (2), chaos (1); the places put chaos first, the demo last
    # of three (its place, 40, is past the end)
    assert log.read_text().split() == ["test_chaos_slice", "test_many", "test_many", "test_many",
                                       "test_demo", "test_demo"]


def test_each_process_writes_when_each_test_ran_set_up_included(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    folder = pytester.mkdir("timeline")
    monkeypatch.setenv("PDLIFT_TEST_TIMELINE", str(folder))
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
    assert written.name == "timeline-main.tsv"
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
