"""Run ledgers in the state store: one JSON document per run, updated read-change-write with the
store's conditional writes, so two flows of a run (or two workers) never overwrite each other.

The ledger is a convenience for resume and reporting; the tags on every resource are the source
of truth that teardown and the sweep rely on, so losing it never leaks anything.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from tasks.adapters.state_store import CREATE, LocalStore, StateConflict, StateStore, write_atomic
from tasks.errors import ConfigError, StageFailed
from tasks.planning.ledger import Ledger, LedgerFormatError

__all__ = ["LedgerStore", "write_atomic"]

UPDATE_ATTEMPTS = 20  # each lost race re-reads and re-applies the change; this many in a row is a fault


class LedgerStore:
    def __init__(self, store: StateStore | Path | None = None):
        """``store``, or a directory (default: PDLIFT_STATE_DIR, else ./.pdlift) as a local store."""
        if store is None or isinstance(store, Path):
            store = LocalStore(store or Path(os.environ.get("PDLIFT_STATE_DIR") or Path.cwd() / ".pdlift"))
        self.store: StateStore = store

    @staticmethod
    def key(deployment: str, run_id: str) -> str:
        return f"runs/{deployment}/{run_id}.json"

    def where(self, deployment: str, run_id: str) -> str:
        return f"{self.store.uri}/{self.key(deployment, run_id)}"

    def load(self, deployment: str, run_id: str) -> Ledger | None:
        """The run's ledger; None when it has none yet."""
        return self._read(deployment, run_id)[0]

    def _read(self, deployment: str, run_id: str) -> tuple[Ledger | None, str]:
        """(the ledger, its etag); (None, CREATE) when it has none. A document this pdlift cannot
        read is refused (ConfigError naming it), never overwritten: it may be a newer pdlift's."""
        got = self.store.get(self.key(deployment, run_id))
        if got is None:
            return None, CREATE
        try:
            return Ledger.from_dict(json.loads(got.data)), got.etag
        except (ValueError, LedgerFormatError) as e:
            raise ConfigError(f"cannot read the run ledger {self.where(deployment, run_id)}: {e}. Move it aside to "
                              f"start the run afresh (resources are found by their tags, so `pdlift teardown` "
                              f"still releases them)") from e

    def save(self, ledger: Ledger) -> None:
        """Write ``ledger`` as it is (a new run's first record, a copy between stores)."""
        self.store.put(self.key(ledger.deployment, ledger.run_id), _dumps(ledger))

    def update(self, deployment: str, run_id: str, change: Callable[[Ledger | None], Ledger]) -> Ledger:
        """Apply ``change`` to the stored ledger and write it only if nobody wrote in between;
        when someone did, read again and apply ``change`` to what they wrote."""
        for _ in range(UPDATE_ATTEMPTS):
            current, etag = self._read(deployment, run_id)
            changed = change(current)
            try:
                self.store.put(self.key(deployment, run_id), _dumps(changed), if_match=etag)
            except StateConflict:
                continue
            return changed
        raise StageFailed(f"the run ledger {self.where(deployment, run_id)} changed under every one of "
                          f"{UPDATE_ATTEMPTS} updates in a row: is another worker looping on this run?")

    def runs(self, deployment: str) -> list[str]:
        prefix = f"runs/{deployment}/"
        return sorted(k[len(prefix):-len(".json")] for k in self.store.keys(f"runs/{deployment}")
                      if k.endswith(".json") and "/" not in k[len(prefix):])


def _dumps(ledger: Ledger) -> bytes:
    return json.dumps(ledger.to_dict(), indent=2, sort_keys=True).encode()
