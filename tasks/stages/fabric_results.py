"""Where one run's fabric results go: ``<state>/runs/<deployment>/<run_id>/fabric/``.

It holds ``report.md``, ``results.json`` (``tasks.planning.fabric.report.results_json``) and
``raw/NNNN-<test>.txt``, each command's output, kept for trend baselines and for reading what a
node printed when it was isolated.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

from tasks.errors import ConfigError
from tasks.planning.fabric.outcome import Ran

_SAFE = re.compile(r"[^A-Za-z0-9_.<>-]")
_PATH_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def results_key(deployment: str, run_id: str) -> str:
    """The run's fabric folder in the state store (raw tool output, results.json, report.md)."""
    for what, value in (("deployment", deployment), ("run id", run_id)):
        if not _PATH_SAFE.match(value) or ".." in value:
            raise ConfigError(f"{what} {value!r} cannot name a results folder (letters, digits, '.', '_', '-')")
    return f"runs/{deployment}/{run_id}/fabric"


def results_dir(root: Path, deployment: str, run_id: str) -> Path:
    return root / results_key(deployment, run_id)


class ResultsDir:
    """Where one run's fabric results go; ``None`` keeps them in memory only."""

    def __init__(self, root: Path | None):
        self.root = root
        self.tests: list[dict] = []
        self._lock = threading.Lock()
        if root is not None:
            (root / "raw").mkdir(parents=True, exist_ok=True)

    def keep(self, test_id: str, ran: Ran) -> None:
        with self._lock:
            n = len(self.tests) + 1
            raw = f"raw/{n:04d}-{_SAFE.sub('_', test_id)[:100]}.txt"
            self.tests.append({"test": test_id, "node": ran.node, "command": ran.command,
                               "exit_code": ran.exit_code, "timed_out": ran.timed_out, "error": ran.error,
                               "seconds": round(ran.seconds, 3), "raw": raw if self.root else None})
        if self.root is not None:
            (self.root / raw).write_text(f"$ {ran.command}\n# exit {ran.exit_code}"
                                         f"{' (timed out)' if ran.timed_out else ''}\n"
                                         f"--- stdout\n{ran.stdout}\n--- stderr\n{ran.stderr}\n")

    def write(self, results: dict, markdown: str) -> None:
        if self.root is None:
            return
        (self.root / "results.json").write_text(json.dumps(results, indent=2, sort_keys=True, default=str))
        (self.root / "report.md").write_text(markdown)
