"""Where run ledgers live: one JSON file per run under the state directory, written atomically.

The ledger is a convenience for resume and reporting; the tags on every resource are the source
of truth that teardown and the sweep rely on, so losing this file never leaks anything.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from tasks.planning.ledger import Ledger


def state_dir() -> Path:
    return Path(os.environ.get("PDLIFT_STATE_DIR") or Path.cwd() / ".pdlift")


class LedgerStore:
    def __init__(self, root: Path | None = None):
        self.root = (root or state_dir()) / "runs"

    def path(self, deployment: str, run_id: str) -> Path:
        return self.root / deployment / f"{run_id}.json"

    def load(self, deployment: str, run_id: str) -> Ledger | None:
        p = self.path(deployment, run_id)
        if not p.exists():
            return None
        return Ledger.from_dict(json.loads(p.read_text()))

    def save(self, ledger: Ledger) -> None:
        p = self.path(ledger.deployment, ledger.run_id)
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".ledger-")
        with os.fdopen(fd, "w") as f:
            json.dump(ledger.to_dict(), f, indent=2, sort_keys=True, default=str)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)

    def runs(self, deployment: str) -> list[str]:
        folder = self.root / deployment
        return sorted(p.stem for p in folder.glob("*.json")) if folder.exists() else []
