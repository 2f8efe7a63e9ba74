"""A run: its blueprint, its identity, and its ledger in the store every stage reads and writes.

Resources are recorded the moment they exist (``record``), before anything else can fail;
a stage's result is recorded once, by the pipeline runner (``flows/pipeline.py``), through
``finish_stage``. The ledger is saved after every change.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass, field

from blueprints.schema import Blueprint
from tasks.adapters.ledger_store import LedgerStore
from tasks.planning.identity import RunIdentity, default_run_id
from tasks.planning.ledger import Ledger, LedgerEntry, now_str, parse_time
from tasks.planning.records import StageRecord


@dataclass
class Run:
    blueprint: Blueprint
    blueprint_path: str  # the file it was read from: cache keys, and commands an operator can paste
    identity: RunIdentity
    store: LedgerStore
    ledger: Ledger = field(repr=False)
    # Called before every ledger update: raises when this run's lease was taken over meanwhile.
    guard: Callable[[], None] = field(default=lambda: None, repr=False, compare=False)

    @property
    def run_id(self) -> str:
        return self.identity.run_id

    def record(self, entry: LedgerEntry) -> None:
        """Persist a resource the moment it exists (before anything else can fail)."""
        self._update(lambda ledger: ledger.with_entry(entry))

    def ended(self, kind: str, resource_id: str, at: dt.datetime | None = None) -> None:
        self._update(lambda ledger: ledger.ended(kind, resource_id, at or dt.datetime.now(dt.timezone.utc)))

    def ended_instance(self, instance_id: str) -> None:
        self.ended("instance", instance_id)

    def finish_stage(self, record: StageRecord) -> None:
        """The stage of ``record`` is done (only the pipeline runner calls this)."""
        self._update(lambda ledger: ledger.with_record(record))

    def successor(self) -> Ledger | None:
        """The ledger of the run a fleet update of this run's fleet handed (or hands) it to."""
        handover = self.ledger.handover()
        return self.store.load(self.blueprint.name, handover.successor) if handover else None

    def reload(self) -> None:
        """Read the ledger again (another flow of this run may have written it since)."""
        self.ledger = self.store.load(self.blueprint.name, self.run_id) or self.ledger

    def _update(self, change) -> None:
        self.guard()
        # Read, change, write only if unchanged (else again): a stage runs for hours, and what
        # another flow of this run wrote meanwhile (a teardown's end times) must not be
        # overwritten by this one's old copy.
        self.ledger = self.store.update(self.blueprint.name, self.run_id,
                                        lambda stored: change(stored or self.ledger))


def open_run(bp: Blueprint, blueprint_path: str, run_id: str | None, store: LedgerStore,
             now: dt.datetime | None = None, guard: Callable[[], None] = lambda: None) -> Run:
    """This run's ledger, or a new one, written at once and only if none exists (of two runs that
    start together, both go on with the first one's). The start time is fixed when the ledger is
    first written, so tags, idempotency tokens and costs of a resumed run keep their first start."""
    rid = run_id_of(bp, run_id)
    ledger = store.load(bp.name, rid) or store.update(
        bp.name, rid, lambda stored: stored or Ledger(bp.name, rid, now_str(now or dt.datetime.now(dt.timezone.utc))))
    return Run(bp, blueprint_path, RunIdentity(bp.name, rid, parse_time(ledger.created_at), bp.aws.ttl_hours), store,
               ledger, guard)


def run_id_of(bp: Blueprint, run_id: str | None = None) -> str:
    """``run_id``, or the one derived from the blueprint (so re-running the same blueprint adopts)."""
    return run_id or default_run_id(json.dumps(bp.model_dump(mode="json", by_alias=True), sort_keys=True))
