"""scripts/test_report.py: the end of scripts/test, each lane's outcome, the wall time and the
slowest tests, written to .pdlift/test-times.md for the next person."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
import test_report  # noqa: E402

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
  <testcase classname="tests.e2e.test_demo" name="test_the_demo" time="181.2"/>
  <testcase classname="tests.unit.test_a" name="test_fails" time="0.5"><failure message="x"/></testcase>
  <testcase classname="tests.unit.test_a" name="test_errs" time="0.25"><error message="y"/></testcase>
  <testcase classname="tests.unit.test_a" name="test_skips" time="0.0"><skipped message="z"/></testcase>
</testsuite></testsuites>
"""


def test_each_lane_its_counts_and_time_then_the_slowest_first_with_anything_not_passed_marked(tmp_path):
    other = tmp_path / "other.xml"
    other.write_text(JUNIT)
    measured = tmp_path / "measured.xml"
    measured.write_text('<testsuites><testsuite><testcase classname="tests.flows.test_recreate" '
                        'name="test_passes" time="81.7"/></testsuite></testsuites>')
    text = test_report.report(1000.0, [("measured", 0, measured), ("other", 1, other)], 2410.4)
    lines = text.splitlines()
    assert lines[0].startswith("scripts/test: 1410 s wall (")
    assert lines[1] == "  measured lane: exit 0, 1 tests (1 passed, 0 failed, 0 errors, 0 skipped), 82 s of test time"
    assert lines[2] == "  other lane: exit 1, 4 tests (1 passed, 1 failed, 1 errors, 1 skipped), 182 s of test time"
    slowest = lines[lines.index("the 25 slowest tests (seconds, lane, test):") + 1:]
    assert slowest == ["    181.2  other     tests/e2e/test_demo::test_the_demo",
                       "     81.7  measured  tests/flows/test_recreate::test_passes",
                       "      0.5  other     tests/unit/test_a::test_fails  [failure]",
                       "      0.2  other     tests/unit/test_a::test_errs  [error]",
                       "      0.0  other     tests/unit/test_a::test_skips  [skipped]"]


def test_a_lane_that_wrote_no_junit_file_counts_no_tests_and_only_the_25_slowest_are_listed(tmp_path):
    many = tmp_path / "many.xml"
    many.write_text("<testsuites><testsuite>" + "".join(
        f'<testcase classname="tests.unit.test_m" name="t{i}" time="{i}"/>' for i in range(30)) + "</testsuite></testsuites>")
    text = test_report.report(0.0, [("measured", 5, tmp_path / "absent.xml"), ("other", 0, many)], 60.0)
    assert "  measured lane: exit 5, 0 tests (0 passed, 0 failed, 0 errors, 0 skipped), 0 s of test time" in text
    listed = text.split("(seconds, lane, test):\n", 1)[1].splitlines()
    assert len(listed) == 25 and listed[0].endswith("::t29") and listed[-1].endswith("::t5")


def test_main_prints_the_report_and_writes_it_for_the_next_person(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(test_report, "REPO", tmp_path)
    junit = tmp_path / "lane.xml"
    junit.write_text(JUNIT)
    assert test_report.main(["--started", "0", "--lane", "other", "0", str(junit)]) == 0
    printed = capsys.readouterr().out
    assert "other lane: exit 0, 4 tests" in printed
    assert (tmp_path / ".pdlift" / "test-times.md").read_text() == printed
