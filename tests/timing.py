"""The marker for tests whose assertions read a wall clock or a throughput measured on this machine.

CI runs the whole suite on a shared 2-core machine, where a burst of other work can stretch one
measurement past its bound. Such a test gets two more tries (a real regression fails all three);
every other test gets one. Speed goals themselves are measured in scripts/bench/, not here.
"""

import pytest

timing = pytest.mark.flaky(reruns=2, reruns_delay=2)
