"""Per-package line and branch coverage from coverage.py's JSON report (scripts/coverage).

`python scripts/coverage_table.py coverage.json [other.json [--git BEFORE AFTER]]`: one markdown
row per package (cli, flows, tasks, blueprints, scripts). With a second report, the rows compare the
two and a last section lists, per file, the lines covered in the first and not in the second.

Line numbers move whenever a file changes, so with ``--git BEFORE AFTER`` (the commits each report
was measured on, read from this repository) each line covered before is followed to its place
after by a diff of the file's two versions: a line that is still there and no longer covered is
lost coverage; a line the change deleted or rewrote is listed apart, as deleted, for a person to
check that what replaced it is covered.
"""
from __future__ import annotations

import difflib
import json
import subprocess
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


def follow(before: str, after: str) -> dict[int, int]:
    """Each line number of ``before`` (1-based) that the diff keeps, to its number in ``after``."""
    a, b = before.splitlines(), after.splitlines()
    moved: dict[int, int] = {}
    for block in difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks():
        for k in range(block.size):
            moved[block.a + k + 1] = block.b + k + 1
    return moved


def source_at(commit: str, name: str) -> str | None:
    """The file as it was at ``commit`` in this repository, or None where it did not exist."""
    shown = subprocess.run(["git", "show", f"{commit}:{name}"], capture_output=True, text=True,
                           cwd=Path(__file__).resolve().parents[1])
    return shown.stdout if shown.returncode == 0 else None


def compare_lines(first: dict[str, dict], second: dict[str, dict], sources=None) -> tuple[dict, dict]:
    """(lost, deleted): per file, the lines covered in ``first`` that are still there and not
    covered in ``second``, and (with ``sources(name) -> (before, after)`` texts) those the change
    deleted or rewrote. Without sources every line keeps its number."""
    lost: dict[str, list[int]] = {}
    deleted: dict[str, list[int]] = {}
    for name, data in sorted(first.items()):
        covered = sorted(set(data["executed_lines"]))
        after = set(second.get(name, {}).get("executed_lines", []))
        if sources is None:
            moved = {line: line for line in covered}
        else:
            before_text, after_text = sources(name)
            moved = follow(before_text or "", after_text or "")
        gone = [line for line in covered if line not in moved]
        missed = [line for line in covered if line in moved and moved[line] not in after]
        if gone:
            deleted[name] = gone
        if missed:
            lost[name] = missed
    return lost, deleted


def main(argv: list[str]) -> int:
    args = argv[1:]
    commits = None
    if "--git" in args:
        at = args.index("--git")
        commits = args[at + 1:at + 3]
        if len(commits) != 2:
            print("usage: coverage_table.py BEFORE.json AFTER.json --git BEFORE_COMMIT AFTER_COMMIT",
                  file=sys.stderr)
            return 2
        del args[at:at + 3]
    first = load(args[0])
    if len(args) == 1:
        print("| package | lines covered | branches covered |")
        print("|---|---|---|")
        for package, (cl, nl, cb, nb) in totals(first).items():
            print(f"| {package} | {cell(cl, nl)} | {cell(cb, nb)} |")
        return 0
    second = load(args[1])
    a, b = totals(first), totals(second)
    print("| package | lines before | lines after | branches before | branches after |")
    print("|---|---|---|---|---|")
    for package in a:
        print(f"| {package} | {cell(a[package][0], a[package][1])} | {cell(b[package][0], b[package][1])}"
              f" | {cell(a[package][2], a[package][3])} | {cell(b[package][2], b[package][3])} |")
    sources = None
    if commits:
        def sources(name: str) -> tuple[str | None, str | None]:
            return source_at(commits[0], name), source_at(commits[1], name)
    lost, deleted = compare_lines(first, second, sources)
    print("\nLines covered before, still there and not covered after (file: line numbers before the change):"
          if commits else "\nLines covered before and not after (file: lines):")
    for name, lines in lost.items():
        print(f"- {name}: {lines}")
    if commits:
        counts = {p: 0 for p in PACKAGES}
        for name, lines in lost.items():
            counts[package_of(name)] += len(lines)
        print("\nLost per package: " + ", ".join(f"{p} {n}" for p, n in counts.items()))
        print("\nLines covered before that the change deleted or rewrote (file: lines before it):")
        for name, lines in deleted.items():
            print(f"- {name}: {len(lines)} lines: {lines}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
