"""Per-package line and branch coverage from coverage.py's JSON report (scripts/coverage).

`python scripts/coverage_table.py coverage.json [other.json]`: one markdown row per package
(cli, flows, tasks, blueprints, scripts). With a second report, the rows compare the two and a
last section lists, per package, the lines covered in the first and not in the second.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

PACKAGES = ("cli", "flows", "tasks", "blueprints", "scripts")


def package_of(path: str) -> str | None:
    parts = Path(path).parts
    for i, part in enumerate(parts):
        if part in PACKAGES and i + 1 < len(parts):
            return part
    return None


def relative(path: str) -> str:
    parts = Path(path).parts
    for i, part in enumerate(parts):
        if part in PACKAGES:
            return str(Path(*parts[i:]))
    return path


def load(report: str) -> dict[str, dict]:
    files = json.loads(Path(report).read_text())["files"]
    return {relative(name): data for name, data in files.items() if package_of(name)}


def totals(files: dict[str, dict]) -> dict[str, list[int]]:
    rows = {p: [0, 0, 0, 0] for p in PACKAGES}
    for name, data in files.items():
        s = data["summary"]
        row = rows[package_of(name)]
        row[0] += s["covered_lines"]
        row[1] += s["num_statements"]
        row[2] += s.get("covered_branches", 0)
        row[3] += s.get("num_branches", 0)
    rows["total"] = [sum(r[i] for r in rows.values()) for i in range(4)]
    return rows


def cell(covered: int, total: int) -> str:
    return f"{covered}/{total} ({100 * covered / total:.1f}%)" if total else "-"


def main(argv: list[str]) -> int:
    first = load(argv[1])
    if len(argv) == 2:
        print("| package | lines covered | branches covered |")
        print("|---|---|---|")
        for package, (cl, nl, cb, nb) in totals(first).items():
            print(f"| {package} | {cell(cl, nl)} | {cell(cb, nb)} |")
        return 0
    second = load(argv[2])
    a, b = totals(first), totals(second)
    print("| package | lines before | lines after | branches before | branches after |")
    print("|---|---|---|---|---|")
    for package in a:
        print(f"| {package} | {cell(a[package][0], a[package][1])} | {cell(b[package][0], b[package][1])}"
              f" | {cell(a[package][2], a[package][3])} | {cell(b[package][2], b[package][3])} |")
    print("\nLines covered before and not after (file: lines):")
    for name, data in sorted(first.items()):
        before = set(data["executed_lines"])
        after = set(second.get(name, {}).get("executed_lines", []))
        lost = sorted(before - after)
        if lost:
            print(f"- {name}: {lost}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
