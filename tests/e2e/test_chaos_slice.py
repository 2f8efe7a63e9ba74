"""The fast slice of the chaos campaign (scripts/bench/chaos.py; the full one is on demand, see
docs/reliability.md): one seeded trial on a stack of its own. SeaweedFS goes away for 21 s, 1.1 s
into weight staging; the trial ends in a gate decision or a clean failure with every invariant
kept. (A worker killed mid-staging, the slice's second trial before, is the takeover test's first
step: tests/e2e/test_two_workers_takeover.py; the campaign checks that fault with
`scripts/bench/chaos.py --faults worker-sigkill`.)"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from sandbox import ports
from tests.fixtures import loopback

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]
REPO = Path(__file__).resolve().parents[2]


def test_a_seeded_slice_of_the_chaos_campaign_keeps_every_invariant(tmp_path):
    # Nothing of the suite's Prefect, AWS or pdlift settings, but its test slot (ports.SLOT_VARIABLE):
    # without it the campaign's sandbox drew ports from a slice another lane draws from, and took a
    # port the measured lane's `sandbox up` had just found free (SeaweedFS: "port 11787 ... is not
    # available").
    env = {k: v for k, v in os.environ.items()
           if (not k.startswith(("PREFECT_", "AWS_", "PDLIFT_")) or k == ports.SLOT_VARIABLE) and k != "KUBECONFIG"}
    env.update({"DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"})
    table = tmp_path / "chaos.md"
    out = subprocess.run([str(REPO / ".venv" / "bin" / "python"), "scripts/bench/chaos.py", "--trials", "1",
                          "--seed", "3", "--faults", "s3-down", "--state", str(tmp_path / "chaos"),
                          "--node-base", loopback.node_base(), "--table", str(table)],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=2300)
    last = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
    assert re.fullmatch(r"chaos: trials=1 converged=\d clean_failures=\d violations=0", last), \
        out.stdout[-4000:] + out.stderr[-4000:]
    rows = [line for line in table.read_text().splitlines()[2:] if line.startswith("|")]
    assert [row.split("|")[5].strip() for row in rows] == ["s3-down"]
    # The fault hit the run where it was meant to (not after its end): the weights staging.
    assert [row.split("|")[3].strip() for row in rows] == ["weights"], rows
    assert [row.split("|")[4].strip() for row in rows] == ["1.1 s"], rows
