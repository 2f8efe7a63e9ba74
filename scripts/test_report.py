"""The end of `scripts/test`: each lane's outcome, the wall time and the 25 slowest tests.

    python scripts/test_report.py --started EPOCH --lane NAME STATUS JUNIT.xml [--lane ...]

Prints the report and writes it to .pdlift/test-times.md (ignored by git), so the next person sees
where the suite's time goes without running it again. A test's time is pytest's junit time: its
set-up, call and tear-down together (a session fixture's set-up counts for the first test that
asks for it).
"""

from __future__ import annotations

import argparse
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SLOWEST = 25


def tests_of(junit: Path) -> list[tuple[float, str, str]]:
    """(seconds, test id, outcome) of every test in a junit file; [] when there is none."""
    if not junit.is_file():
        return []
    rows = []
    for case in ET.parse(junit).iter("testcase"):
        path = (case.get("classname") or "").replace(".", "/")
        outcome = next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), "passed")
        rows.append((float(case.get("time") or 0.0), f"{path}::{case.get('name')}", outcome))
    return rows


def report(started: float, lanes: list[tuple[str, int, Path]], now: float) -> str:
    lines = [f"scripts/test: {now - started:.0f} s wall ({time.strftime('%Y-%m-%d %H:%M', time.gmtime(now))} UTC)"]
    every = []
    for name, status, junit in lanes:
        rows = tests_of(junit)
        every += [(s, t, o, name) for s, t, o in rows]
        counts = {o: sum(1 for _, _, x in rows if x == o) for o in ("passed", "failure", "error", "skipped")}
        lines.append(f"  {name} lane: exit {status}, {len(rows)} tests ({counts['passed']} passed, "
                     f"{counts['failure']} failed, {counts['error']} errors, {counts['skipped']} skipped), "
                     f"{sum(s for s, _, _ in rows):.0f} s of test time")
    lines.append(f"\nthe {SLOWEST} slowest tests (seconds, lane, test):")
    for seconds, test, outcome, lane in sorted(every, reverse=True)[:SLOWEST]:
        lines.append(f"  {seconds:7.1f}  {lane:8}  {test}" + ("" if outcome == "passed" else f"  [{outcome}]"))
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--started", type=float, required=True, help="when scripts/test started (epoch s)")
    parser.add_argument("--lane", nargs=3, action="append", default=[], metavar=("NAME", "STATUS", "JUNIT"))
    args = parser.parse_args(argv)
    text = report(args.started, [(n, int(s), Path(j)) for n, s, j in args.lane], time.time())
    print(text, end="")
    target = REPO / ".pdlift" / "test-times.md"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
