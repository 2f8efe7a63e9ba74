"""scripts/coverage_table.py: a line covered before is lost only if it is still there after the
change and not covered; a line the change moved is followed, one it deleted is listed apart."""

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "coverage_table", Path(__file__).resolve().parents[2] / "scripts" / "coverage_table.py")
coverage_table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(coverage_table)

BEFORE = "import os\nx = 1\ny = 2\nz = 3\n"
AFTER = "import os\n# a comment added above\nx = 1\nz = 3\nw = 4\n"  # y deleted, x and z moved down


def _report(lines):
    return {"tasks/m.py": {"executed_lines": lines}}


def test_a_moved_line_is_followed_and_a_deleted_one_is_listed_apart():
    assert coverage_table.follow(BEFORE, AFTER) == {1: 1, 2: 3, 4: 4}
    # covered before: 1-4; after: the same statements at their new numbers, w not covered
    lost, deleted = coverage_table.compare_lines(_report([1, 2, 3, 4]), _report([1, 3, 4]),
                                                 lambda name: (BEFORE, AFTER))
    assert lost == {} and deleted == {"tasks/m.py": [3]}


def test_a_line_still_there_and_no_longer_covered_is_lost_at_its_old_number():
    # x (2 before, 3 after) no longer covered; z (4 before, 4 after) still is
    lost, deleted = coverage_table.compare_lines(_report([1, 2, 4]), _report([1, 4]),
                                                 lambda name: (BEFORE, AFTER))
    assert lost == {"tasks/m.py": [2]} and deleted == {}


def test_a_file_the_change_removed_is_all_deleted_and_without_sources_numbers_are_kept():
    lost, deleted = coverage_table.compare_lines(_report([1, 2]), {}, lambda name: (BEFORE, None))
    assert lost == {} and deleted == {"tasks/m.py": [1, 2]}
    lost, deleted = coverage_table.compare_lines(_report([1, 2, 3]), _report([1, 3]))
    assert lost == {"tasks/m.py": [2]} and deleted == {}
