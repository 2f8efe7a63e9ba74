"""The marker for tests whose assertions read a wall clock or a throughput measured on this machine
against a tight bound.

`scripts/test` runs such tests in the measured lane: one process at normal priority, beside the
other lane's tests at the lowest priority (nice 19), so a burst of other work cannot stretch what
they measure (tests/lanes.py). Nothing is ever retried: a test that fails once has failed.
"""

import pytest

timing = pytest.mark.exact
