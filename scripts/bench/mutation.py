#!/usr/bin/env python3
"""Benchmark: how many mutants of pdlift's pure decision code its unit tests kill.

    scripts/bench/mutation.py [MODULE ...]      # a campaign: mutmut over the modules (default: the
                                                # eleven the Suite issue names), their unit tests only
    scripts/bench/mutation.py --named           # the hand-made mutants named in earlier notes, rerun
    .venv/bin/python scripts/bench/mutation.py tasks/planning/lease.py --show-survivors

A MODULE is a path (``tasks/planning/lease.py``), a dotted name (``tasks.planning.lease``) or a
file name below ``tasks/planning`` or ``tasks/parsing`` (``lease``, ``fabric/judge``). The last line
is the score over every module of the run, equivalent mutants excluded:

    mutation score: 312/331 killed (94.3%) over 12 modules

The tool: mutmut, pinned to 3.8.1 (PyPI ``mutmut==3.8.1``), installed on first use into
``<state>/bench-peers/mutmut-3.8.1/`` by ``peers.py`` (never into pdlift's test dependencies, so
``scripts/test`` stays as fast as it was). Chosen over cosmic-ray 8.7.0 because:

- it picks the tests per mutant itself: one pytest pass records which test ran which function,
  and each mutant then runs only the tests that reach its function (cosmic-ray runs one fixed
  test command per mutant);
- it forks each mutant from a process that has already imported pytest, the tests and pdlift, so
  a mutant costs milliseconds, not a pytest start-up (about 2.7 s here, with the suite's
  conftest): a campaign over the eleven modules takes minutes on 2 cores instead of about an hour;
- it never writes into the checkout: it mutates a copy (``mutants/``) of a snapshot this script
  makes under ``<state>/mutation/`` (cosmic-ray rewrites the source file in place, which another
  person's test run in the same checkout would pick up);
- it is maintained (3.8.1 is this year's release line, with fork-server isolation and
  per-function result caching) and runs here on Python 3.11 with no compiler.

What mutmut 3 does not mutate, and so this score does not measure: code outside functions
(module-level constants and tables, such as the error-code sets in ``aws_errors.py``, and class
bodies) and functions under a decorator other than ``@staticmethod``/``@classmethod`` (so no
``@property``). ``--named`` reruns hand-made mutants, some of them in exactly such places.

How a campaign runs:

1. A snapshot of the checkout (the files git tracks or would track, uncommitted edits included)
   is copied into ``<state>/mutation/campaign/``, removed first: every run starts fresh, so
   nothing is remembered from an earlier run's tests (mutmut's own cache keys on the source only).
2. The unit tests for the modules are found, not listed by hand: the files under ``tests/unit``
   that import the module, directly or through other product modules (``tests_for``).
3. ``mutmut run`` there, with the repository's ``.venv`` packages on its path, Hypothesis
   derandomized and without its example database (so a fuzz test meets the same examples under
   every mutant), and ``--max-children`` = ``--jobs`` (default: the CPU count).
4. Each mutant's diff is read back and keyed stably by its module, function and the source
   text before and after (no line numbers, no mutant numbers): ``mutation_equivalent.toml`` next
   to this script lists the equivalent ones, each with a one-line reason, by that key.
   A mutant mutmut found no test for ("no tests") counts as surviving.

Per module the report prints mutants / killed / survived / equivalent excluded / score, then (with
``--show-survivors``, or always in ``<state>/mutation/campaign/report.txt``) every survivor's diff.
``--named`` prints each named mutant with the test that killed it; its last line is
``named mutants: K/T killed (P%)``. Neither mode changes a file of the checkout: both work on
copies, and ``--named`` checks at the end that every file it mutated is back to its original.

Run it niced beside other work: ``nice -n 19 scripts/bench/mutation.py``.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import threading
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import peers  # noqa: E402  (standard library only)

if __name__ == "__main__":
    peers.run_in_repo_venv(__file__)

# mutmut's console script needs a configuration in its working directory even for --version,
# so the install is checked with the interpreter of its virtualenv instead.
MUTMUT = peers.Peer("mutmut", "3.8.1", "bin/python",
                    ("-c", "import importlib.metadata as m; print('mutmut', m.version('mutmut'))"),
                    "about 45 MB, 10 to 20 s")
PEERS = (MUTMUT,)

# The modules of the Suite issue's point 5, in its order (the nccl-tests parser is two files).
DEFAULT_MODULES = (
    "tasks/planning/fabric/judge.py",
    "tasks/parsing/nccl_tests.py",
    "tasks/parsing/nccl_model.py",
    "tasks/parsing/pingpong.py",
    "tasks/planning/ledger.py",
    "tasks/planning/lease.py",
    "tasks/planning/ec2_requests.py",
    "tasks/planning/rolling.py",
    "tasks/planning/kv_fingerprint.py",
    "tasks/planning/staging.py",
    "tasks/planning/aws_errors.py",
    "tasks/planning/capacity_math.py",
)
MUTABLE_ROOTS = ("tasks/planning", "tasks/parsing")
EQUIVALENT_FILE = HERE / "mutation_equivalent.toml"
NAMED_FILE = HERE / "mutation_named.toml"
# What the tests import besides tasks/ (conftest plugins: sandbox, tests.fixtures).
ALSO_COPY = ("blueprints", "sandbox", "cli", "flows", "scripts", "deploy", "prefect.yaml")
# The suite's addopts (-m 'not real_engines', --durations, -ra) are left out: only unit tests run.
PYTEST_ARGS = ("-p", "no:cacheprovider", "-p", "_mutation_determinism", "-o", "addopts=")
DETERMINISM_PLUGIN = '''"""Loaded by scripts/bench/mutation.py: Hypothesis derandomized, without its example database."""
from hypothesis import settings

settings.register_profile("pdlift-mutation", derandomize=True, database=None)
settings.load_profile("pdlift-mutation")
'''
KILLED = {"killed", "timeout", "segfault"}
# mutmut's exit-code table (mutmut/stats.py status_by_exit_code), repeated so the report can be
# read without importing mutmut into this interpreter.
STATUS_BY_EXIT_CODE = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests", 2: "interrupted",
                       None: "not checked", 34: "skipped", 35: "suspicious", 36: "timeout", 37: "type check",
                       -24: "timeout", 24: "timeout", 152: "timeout", 255: "timeout", -11: "segfault", -9: "segfault"}


def say(message: str) -> None:
    print(f"mutation: {message}", file=sys.stderr, flush=True)


# --- modules and their tests -------------------------------------------------------------------


def resolve_module(name: str, root: Path = ROOT) -> str:
    """A module argument as a path relative to the repository (``tasks/planning/lease.py``)."""
    cand = name.strip()
    if cand.endswith(".py") and (root / cand).is_file():
        path = cand
    elif (root / (cand.replace(".", "/") + ".py")).is_file():
        path = cand.replace(".", "/") + ".py"
    else:
        stem = cand.removesuffix(".py")
        found = [f"{base}/{stem}.py" for base in MUTABLE_ROOTS if (root / base / f"{stem}.py").is_file()]
        if len(found) != 1:
            raise SystemExit(f"mutation: {name!r} is not a module below {' or '.join(MUTABLE_ROOTS)}"
                             + (f" (it could be {', '.join(found)})" if found else ""))
        path = found[0]
    if not path.startswith(tuple(r + "/" for r in MUTABLE_ROOTS)):
        raise SystemExit(f"mutation: {path} is outside {' and '.join(MUTABLE_ROOTS)}: not part of this campaign")
    return path


def _dotted(path: Path, root: Path) -> str:
    return ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return out


def tests_for(modules: list[str], root: Path = ROOT) -> dict[str, list[str]]:
    """Per module path, the test files under tests/unit that import it, directly or through the
    product modules they import (``from tasks.planning import lease`` counts, as does a stage
    module that uses the ledger). mutmut then runs, per mutant, only those of their tests that
    reached the mutated function."""
    product = {_dotted(p, root): p for top in ("tasks", "blueprints") for p in (root / top).rglob("*.py")}
    deps = {name: {i for i in _imports(p) if i in product} for name, p in product.items()}

    def closure(start: set[str]) -> set[str]:
        seen: set[str] = set()
        stack = list(start)
        while stack:
            m = stack.pop()
            if m not in seen:
                seen.add(m)
                stack += deps.get(m, ())
        return seen

    tests = sorted((root / "tests" / "unit").rglob("test_*.py"))
    reach = {t: closure({i for i in _imports(t) if i in product}) for t in tests}
    return {m: [str(t.relative_to(root)) for t in tests if _dotted(root / m, root) in reach[t]] for m in modules}


# --- workspace ---------------------------------------------------------------------------------


def snapshot(dest: Path) -> None:
    """Copy the checkout's files (tracked, and untracked ones git does not ignore) into ``dest``."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            check=True, capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = ROOT / rel
        if rel.startswith("docs/") or not src.is_file():
            continue  # docs are not imported; a file deleted but still in the index is gone
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)
    (dest / "_mutation_determinism.py").write_text(DETERMINISM_PLUGIN)


def repo_site_packages() -> list[str]:
    """The .venv's package directories (this script runs under the .venv: see run_in_repo_venv)."""
    paths = sysconfig.get_paths()
    return list(dict.fromkeys([paths["purelib"], paths["platlib"]]))


def compile_site_packages() -> None:
    """The .venv's packages compiled to bytecode, once per install: scripts/setup leaves that to
    the first import, and every test process of the campaign runs with PYTHONDONTWRITEBYTECODE (no
    mutated module's bytecode is kept), so none of them would keep what it compiled. About 25 s;
    a stamp newer than scripts/setup's says it is done (compileall alone takes 12 s to find so)."""
    venv = Path(sys.prefix)
    done, installed = venv / ".pdlift-compiled", venv / ".pdlift-installed"
    if done.exists() and (not installed.exists() or done.stat().st_mtime >= installed.stat().st_mtime):
        return
    say("compiling the .venv's packages to bytecode (once per install)")
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", *repo_site_packages()],
                   stdout=subprocess.DEVNULL, check=False)
    done.touch()


def tool_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """mutmut's interpreter with pdlift's dependencies importable (on PYTHONPATH, ahead of mutmut's
    own copies of shared packages such as pytest: the versions the suite runs with). The .venv's
    .pth files, pdlift's editable install among them, are not read: the mutated copy is imported."""
    env = peers.peer_env(MUTMUT, dict(os.environ if base is None else base))
    env["PYTHONPATH"] = os.pathsep.join(repo_site_packages())
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.pop("VIRTUAL_ENV", None)
    return env


def write_config(work: Path, modules: list[str], tests: list[str]) -> None:
    def lines(values) -> str:
        return "".join(f"\n    {v}" for v in values)

    (work / "setup.cfg").write_text(
        "[mutmut]\n"
        "source_paths=tasks\n"
        f"only_mutate={lines(modules)}\n"
        f"also_copy={lines([*ALSO_COPY, '_mutation_determinism.py'])}\n"
        f"pytest_add_cli_args_test_selection={lines(tests)}\n"
        f"pytest_add_cli_args={lines(PYTEST_ARGS)}\n"
        # no git: mutmut's change detection would read the snapshot as a new repository
        "use_git_change_detection=false\n")


# --- the campaign ------------------------------------------------------------------------------


@dataclass
class Mutant:
    name: str       # mutmut's: tasks.planning.lease.x_taken__mutmut_7 (its number changes with the code)
    module: str     # tasks/planning/lease.py
    function: str   # taken, Lease.expired
    before: str     # the changed source lines, stripped, joined by newlines
    after: str
    status: str
    equivalent: str = ""  # the reason, when listed as equivalent

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.module, self.function, _norm(self.before), _norm(self.after))

    def describe(self) -> str:
        return (f"{self.module} {self.function}: {self.status}\n"
                + "".join(f"    - {line}\n" for line in self.before.splitlines())
                + "".join(f"    + {line}\n" for line in self.after.splitlines()))


def _norm(text: str) -> str:
    return " ".join(text.split())


def function_of(mutant_name: str) -> str:
    """``tasks.planning.lease.xǁLeaseǁexpired__mutmut_2`` -> ``Lease.expired``."""
    mangled = mutant_name.rpartition(".")[2].partition("__mutmut_")[0]
    if "ǁ" in mangled:
        _, cls, method = mangled.split("ǁ", 2)
        return f"{cls}.{method}"
    return mangled.removeprefix("x_")


DIFF_HELPER = r'''
import json, sys
from mutmut.mutation.diff_apply import get_diff_for_mutant
out = {}
for path in sys.argv[1:]:
    meta = json.load(open(f"mutants/{path}.meta"))
    out[path] = [[name, code, get_diff_for_mutant(name, path=path)] for name, code in meta["exit_code_by_key"].items()]
json.dump(out, sys.stdout)
'''


def read_mutants(work: Path, python: Path, modules: list[str]) -> list[Mutant]:
    done = subprocess.run([str(python), "-c", DIFF_HELPER, *modules], cwd=work, env=tool_env(), check=True,
                          capture_output=True, text=True)
    out = []
    for module, rows in json.loads(done.stdout).items():
        for name, code, diff in rows:
            before, after = [], []
            for line in diff.splitlines():
                if line.startswith(("---", "+++", "@@")):
                    continue
                if line.startswith("-"):
                    before.append(line[1:].strip())
                elif line.startswith("+"):
                    after.append(line[1:].strip())
            out.append(Mutant(name, module, function_of(name), "\n".join(before), "\n".join(after),
                              STATUS_BY_EXIT_CODE.get(code, "suspicious")))
    return out


def load_equivalents(path: Path = EQUIVALENT_FILE) -> dict[tuple[str, str, str, str], str]:
    if not path.exists():
        return {}
    data = tomllib.loads(path.read_text())
    table = {}
    for e in data.get("mutant", []):
        key = (e["module"], e["function"], _norm(e["before"]), _norm(e["after"]))
        if key in table:
            raise SystemExit(f"mutation: {path.name} lists {e['module']} {e['function']} twice with the same change")
        table[key] = e["why"]
    return table


def toml_entry(m: Mutant) -> str:
    """A mutation_equivalent.toml entry for ``m``, its reason left to write."""
    def lit(s: str) -> str:
        return f"'''{s}'''" if "\n" in s or "'" in s else f"'{s}'"
    return (f'[[mutant]]\nmodule = "{m.module}"\nfunction = "{m.function}"\n'
            f"before = {lit(m.before)}\nafter = {lit(m.after)}\nwhy = \"\"\n")


@dataclass
class ModuleScore:
    module: str
    mutants: int = 0
    killed: int = 0
    equivalent: int = 0
    survivors: list[Mutant] = field(default_factory=list)

    @property
    def judged(self) -> int:
        return self.mutants - self.equivalent

    @property
    def score(self) -> float:
        return 100.0 * self.killed / self.judged if self.judged else 100.0


def score(mutants: list[Mutant], modules: list[str], equivalents: dict) -> tuple[list[ModuleScore], list[Mutant]]:
    """Per module scores; also the equivalence entries that a test kills now (stale)."""
    by_module = {m: ModuleScore(m) for m in modules}
    stale = []
    for m in mutants:
        s = by_module[m.module]
        s.mutants += 1
        why = equivalents.get(m.key)
        if m.status in KILLED:
            s.killed += 1
            if why is not None:
                stale.append(m)  # listed as equivalent, yet a test tells it apart: counted killed
        elif why is not None:
            m.equivalent = why
            s.equivalent += 1
        else:
            s.survivors.append(m)
    return list(by_module.values()), stale


def report(scores: list[ModuleScore], stale: list[Mutant], seconds: float, show_survivors: bool,
           out_file: Path) -> str:
    width = max(len(s.module) for s in scores)
    lines = [f"{'module':<{width}}  mutants  killed  survived  equivalent  score"]
    for s in scores:
        lines.append(f"{s.module:<{width}}  {s.mutants:7d}  {s.killed:6d}  {len(s.survivors):8d}  "
                     f"{s.equivalent:10d}  {s.score:5.1f}%")
    survivors = [m for s in scores for m in s.survivors]
    detail = []
    if survivors:
        detail.append(f"\n{len(survivors)} surviving mutants (neither killed nor listed in {EQUIVALENT_FILE.name}):")
        detail += [m.describe() for m in survivors]
    if stale:
        detail.append(f"\n{len(stale)} mutants listed as equivalent in {EQUIVALENT_FILE.name} are killed now "
                      "(counted killed; remove their entries):")
        detail += [m.describe() for m in stale]
    killed = sum(s.killed for s in scores)
    judged = sum(s.judged for s in scores)
    equivalent = sum(s.equivalent for s in scores)
    tail = [f"\n{equivalent} equivalent mutants excluded ({EQUIVALENT_FILE.name}); campaign took {seconds:.0f} s; "
            f"full report: {out_file}",
            f"mutation score: {killed}/{judged} killed ({100.0 * killed / judged if judged else 100.0:.1f}%) "
            f"over {len(scores)} module{'s' if len(scores) != 1 else ''}"]
    out_file.write_text("\n".join(lines + detail + tail) + "\n")
    shown = lines + (detail if show_survivors else
                     ([f"\n{len(survivors)} survivors: --show-survivors lists them"] if survivors else []))
    return "\n".join(shown + tail)


def _progress(log: Path, stop: threading.Event) -> None:
    """One line a minute with mutmut's count (it redraws its own line, which a log cannot show)."""
    last = ""
    while not stop.wait(60):
        try:
            text = log.read_bytes()[-4000:].decode(errors="replace")
        except OSError:
            continue
        found = re.findall(r"(\d+/\d+)\s+🎉 (\d+)", text)
        if found and found[-1][0] != last:
            last = found[-1][0]
            say(f"{last} mutants tried, {found[-1][1]} killed so far")


def campaign(modules: list[str], jobs: int, show_survivors: bool, state: Path) -> int:
    tool = peers.ensure_or_exit(MUTMUT)
    mutmut = tool.parent / "mutmut"
    work = state / "mutation" / "campaign"
    start = time.monotonic()
    say(f"snapshot of the checkout into {work}")
    snapshot(work)
    per_module = tests_for(modules, work)
    for m, files in per_module.items():
        if not files:
            say(f"{m}: no unit test imports it (its mutants will all count as surviving)")
    tests = sorted({t for files in per_module.values() for t in files})
    write_config(work, modules, tests)
    log = work / "mutmut.log"
    say(f"mutmut {MUTMUT.version} over {len(modules)} module(s) with {len(tests)} unit test files, "
        f"{jobs} at a time (log: {log})")
    stop = threading.Event()
    threading.Thread(target=_progress, args=(log, stop), daemon=True).start()
    with open(log, "w") as out:
        rc = subprocess.call([str(mutmut), "run", "--max-children", str(jobs)], cwd=work, env=tool_env(),
                             stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    stop.set()
    if rc != 0:
        tail = log.read_bytes()[-3000:].decode(errors="replace").replace("\r", "\n")
        print(tail, file=sys.stderr)
        raise SystemExit(f"mutation: mutmut run exited {rc} (its output above; whole log: {log})")
    mutants = read_mutants(work, tool, modules)
    equivalents = load_equivalents()
    scores, stale = score(mutants, modules, equivalents)
    (work / "mutants.json").write_text(json.dumps([m.__dict__ for m in mutants], indent=1, ensure_ascii=False))
    (work / "survivors.toml").write_text("\n".join(toml_entry(m) for s in scores for m in s.survivors))
    print(report(scores, stale, time.monotonic() - start, show_survivors, work / "report.txt"), flush=True)
    return 0


# --- named mutants -----------------------------------------------------------------------------


@dataclass
class Named:
    id: str
    area: str
    file: str
    before: str
    after: str
    origin: str
    tests: list[str]
    result: str = ""
    killed_by: str = ""


def load_named(path: Path = NAMED_FILE) -> list[Named]:
    data = tomllib.loads(path.read_text())
    out = [Named(e["id"], e["area"], e["file"], e["before"], e["after"], e["origin"], list(e["tests"]))
           for e in data["mutant"]]
    ids = [n.id for n in out]
    if len(ids) != len(set(ids)):
        raise SystemExit(f"mutation: {path.name} repeats an id")
    return out


def expand(work: Path, tests: list[str]) -> list[str]:
    """Test arguments with their globs expanded in ``work`` (a glob that matches nothing drops out)."""
    out: list[str] = []
    for t in tests:
        out += sorted(str(p.relative_to(work)) for p in work.glob(t)) if "*" in t else [t]
    return list(dict.fromkeys(out))


def _pytest(work: Path, tests: list[str], timeout_s: float) -> tuple[int, str]:
    argv = [sys.executable, "-m", "pytest", "-x", "-q", "-rf", "--tb=no", *PYTEST_ARGS, *expand(work, tests)]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "DO_NOT_TRACK": "1"}
    try:
        done = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return -1, ""
    return done.returncode, done.stdout + done.stderr


def _first_failure(output: str) -> str:
    m = re.search(r"^(?:FAILED|ERROR) (\S+)", output, re.MULTILINE)
    return m.group(1) if m else ""


def run_named(entry: Named, work: Path, timeout_s: float) -> None:
    target = work / entry.file
    if not target.is_file():
        entry.result = "gone: the file no longer exists"
        return
    original = target.read_bytes()
    text = original.decode()
    found = text.count(entry.before)
    if found != 1:
        entry.result = ("gone: its source text is no longer in the file" if found == 0 else
                        f"ambiguous: its source text is in the file {found} times")
        return
    try:
        target.write_text(text.replace(entry.before, entry.after))
        rc, output = _pytest(work, entry.tests, timeout_s)
    finally:
        target.write_bytes(original)
    if rc == 0:
        entry.result = "survived"
    elif rc == -1:
        entry.result, entry.killed_by = "killed", f"(timeout after {timeout_s:.0f} s)"
    elif rc == 1:
        entry.result, entry.killed_by = "killed", _first_failure(output) or "(a test failed)"
    else:  # the mutant broke collection (a syntax or import error): a mistake in the table, not a kill
        entry.result = f"error: pytest exited {rc} ({_first_failure(output) or 'collection or usage error'})"


def applies(entry: Named, root: Path = ROOT) -> str:
    """"applies", or why the entry's source text cannot be mutated in ``root``."""
    target = root / entry.file
    if not target.is_file():
        return "gone: the file no longer exists"
    found = target.read_text().count(entry.before)
    return ("applies" if found == 1 else "gone: its source text is no longer in the file" if found == 0 else
            f"ambiguous: its source text is in the file {found} times")


def named(jobs: int, state: Path, only: list[str], timeout_s: float, list_only: bool = False) -> int:
    entries = load_named()
    if only:
        entries = [e for e in entries if e.id in only or e.area in only]
        if not entries:
            raise SystemExit(f"mutation: no named mutant has the id or area {', '.join(only)}")
    if list_only:
        for e in entries:
            print(f"{e.id:<5} {e.area:<12} {e.file:<40} {applies(e)}")
        return 0
    start = time.monotonic()
    before_files = _checkout_files(entries)
    works = [state / "mutation" / f"named-{i}" for i in range(max(1, jobs))]
    for w in works:
        snapshot(w)
    found = subprocess.run([sys.executable, "-c", "import tasks; print(tasks.__file__)"], cwd=works[0],
                           capture_output=True, text=True).stdout.strip()
    if not found.startswith(str(works[0])):
        raise SystemExit(f"mutation: in {works[0]} the interpreter imports tasks from {found!r}, not the copy")
    union = expand(works[0], sorted({t for e in entries for t in e.tests}))
    say(f"{len(entries)} named mutants; first the unmutated tests they use ({len(union)} targets)")
    rc, output = _pytest(works[0], union, timeout_s * 4)
    if rc != 0:
        print(output[-3000:], file=sys.stderr)
        raise SystemExit("mutation: the tests fail without any mutant (above): fix them first")
    originals = {w: {e.file: (w / e.file).read_bytes() for e in entries if (w / e.file).is_file()} for w in works}

    def share(k: int) -> None:
        for entry in entries[k::len(works)]:  # one thread per workspace, each with its own share
            run_named(entry, works[k], timeout_s)
            say(f"{entry.id}: {entry.result}{' by ' + entry.killed_by if entry.killed_by else ''}")

    with ThreadPoolExecutor(len(works)) as pool:
        list(pool.map(share, range(len(works))))
    results = entries
    restored = all((w / f).read_bytes() == data for w, files in originals.items() for f, data in files.items())
    unchanged = _checkout_files(entries) == before_files
    width = max(len(e.id) for e in results)
    print(f"{'id':<{width}}  {'area':<14}  result    killed by / why")
    for e in results:
        what = e.killed_by if e.result == "killed" else ("" if e.result == "survived" else e.result)
        print(f"{e.id:<{width}}  {e.area:<14}  {e.result.split(':')[0]:<8}  {what}"
              + (f"\n{'':<{width}}  {'':<14}  {e.file}: {e.origin}" if e.result == "survived" else ""))
    applicable = [e for e in results if e.result in ("killed", "survived")]
    killed = sum(e.result == "killed" for e in applicable)
    errors = sum(e.result.startswith("error") for e in results)
    gone = len(results) - len(applicable) - errors
    print(f"\nmutated copies restored: {'yes' if restored else 'NO'}; the checkout's copies of those files untouched: "
          f"{'yes' if unchanged else 'NO'}; took {time.monotonic() - start:.0f} s")
    print(f"named mutants: {killed}/{len(applicable)} killed "
          f"({100.0 * killed / len(applicable) if applicable else 100.0:.1f}%)"
          + (f", {gone} no longer apply" if gone else "") + (f", {errors} broke the test run (fix their entries)"
                                                              if errors else ""))
    return 0 if restored and unchanged and not errors else 1


def _checkout_files(entries: list[Named]) -> dict[str, bytes | None]:
    """The checkout's own copies of the files the named mutants edit (the run edits only copies)."""
    return {e.file: (ROOT / e.file).read_bytes() if (ROOT / e.file).is_file() else None for e in entries}


# --- command line ------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="The module docstring (scripts/bench/mutation.py) says how it works.")
    p.add_argument("modules", nargs="*", metavar="MODULE",
                   help="modules below tasks/planning or tasks/parsing (default: the fabric, ledger, lease, EC2, rolling and staging decision modules)")
    p.add_argument("--named", action="store_true",
                   help=f"rerun the named mutants of {NAMED_FILE.name} instead (MODULE: ids or areas to rerun)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="mutants at a time (default: CPU count)")
    p.add_argument("--show-survivors", action="store_true", help="print every surviving mutant's change")
    p.add_argument("--timeout", type=float, default=300.0, help="--named: seconds per mutant's test run")
    p.add_argument("--list", action="store_true", help="--named: only say which named mutants still apply")
    peers.add_arguments(p, PEERS)
    args = p.parse_args(argv)
    if args.install_peers:
        peers.ensure_or_exit(MUTMUT)
        return 0
    state = peers.state_dir()
    if not args.list:
        compile_site_packages()
    if args.named:
        return named(args.jobs, state, args.modules, args.timeout, args.list)
    modules = list(dict.fromkeys(resolve_module(m) for m in args.modules)) if args.modules else list(DEFAULT_MODULES)
    return campaign(modules, max(1, args.jobs), args.show_survivors, state)


if __name__ == "__main__":
    sys.exit(main())
