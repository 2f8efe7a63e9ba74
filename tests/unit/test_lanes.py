"""The other lane's scheduler (tests/conftest.py) hands out the long modules of tests/lanes.py
first, whatever their number of tests: xdist's default, the most tests first, started the long
end-to-end modules late and the lane ended on them."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests import lanes

REPO = Path(__file__).resolve().parents[2]
# one test of a module in LONG_FIRST, then two modules with more tests that are not in it
LONG = "tests/adapters/test_ssh.py::test_a_node_without_any_pinned_key_is_refused_before_connecting"
SHORT = ("tests/sandbox/test_ports.py", "tests/unit/test_cpu_group.py")


def test_a_long_module_with_one_test_runs_before_modules_with_more_tests():
    assert lanes.module_of(LONG) in lanes.LONG_FIRST and not set(SHORT) & set(lanes.LONG_FIRST)
    out = subprocess.run([sys.executable, "-m", "pytest", "-n", "1", "--dist", "loadgroup", "-v",
                          "-p", "no:cacheprovider", "-m", "", LONG, *SHORT],
                         cwd=REPO, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    ran = [lanes.module_of(m) for m in re.findall(r"^\[gw0\] .*?(?:PASSED|FAILED|SKIPPED|ERROR) (\S+)",
                                                  out.stdout, re.M)]
    modules = list(dict.fromkeys(ran))
    assert modules[0] == lanes.module_of(LONG), modules
    assert set(modules) == {lanes.module_of(LONG), *SHORT}, modules
