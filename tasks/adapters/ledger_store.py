"""Where run ledgers live: one JSON file per run under the state directory, written atomically.

The ledger is a convenience for resume and reporting; the tags on every resource are the source
of truth that teardown and the sweep rely on, so losing this file never leaks anything.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from tasks.errors import ConfigError
from tasks.planning.ledger import Ledger, LedgerFormatError


def state_dir() -> Path:
    return Path(os.environ.get("PDLIFT_STATE_DIR") or Path.cwd() / ".pdlift")


class LedgerStore:
    def __init__(self, root: Path | None = None):
        self.root = (root or state_dir()) / "runs"

    def path(self, deployment: str, run_id: str) -> Path:
        return self.root / deployment / f"{run_id}.json"

    def load(self, deployment: str, run_id: str) -> Ledger | None:
        """The run's ledger; None when it has none yet. A file this pdlift cannot read is refused
        (ConfigError naming it), never overwritten: it may be a newer pdlift's."""
        p = self.path(deployment, run_id)
        if not p.exists():
            return None
        try:
            return Ledger.from_dict(json.loads(p.read_text()))
        except (ValueError, LedgerFormatError) as e:
            raise ConfigError(f"cannot read the run ledger {p}: {e}. Move it aside to start the run afresh "
                              f"(resources are found by their tags, so `pdlift teardown` still releases them)") from e

    def save(self, ledger: Ledger) -> None:
        text = json.dumps(ledger.to_dict(), indent=2, sort_keys=True)
        write_atomic(self.path(ledger.deployment, ledger.run_id), text)

    def runs(self, deployment: str) -> list[str]:
        folder = self.root / deployment
        return sorted(p.stem for p in folder.glob("*.json")) if folder.exists() else []


def write_atomic(path: Path, data: bytes | str) -> None:
    """Write ``path`` so a reader sees the old file or the whole new one, never a part (fsync, rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-")
    with os.fdopen(fd, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
