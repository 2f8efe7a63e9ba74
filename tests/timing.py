"""The marker for tests whose assertions read a wall clock or a throughput measured on this machine
against a tight bound.

`scripts/test` runs such tests in the exact lane: one process at the highest priority it may take,
beside the other lanes' tests at lower priorities, so a burst of other work cannot stretch what
they measure (tests/lanes.py). Nothing is ever retried: a test that fails once has failed.
"""

import pytest

timing = pytest.mark.exact
