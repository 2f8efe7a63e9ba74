"""The run ledger: every resource a run made, the moment it exists, what it costs, and each stage's record. Pure.

A ledger is plain data, saved after each change, so a crashed run can be resumed or torn down,
and each run can report its spend per stage. Stage results are the typed records of
``tasks.planning.records``; a stage is done when its record is in the ledger.

Recording a pipeline stage again with other resources (a new reservation, other nodes, another
candidate: ``records.identity``) drops the records of the stages after it: they were done on
what it just replaced (new nodes need their fabric proven and their weights staged again).
Recording the same resources again (an adopted reservation) keeps them.

Stored form (``to_dict``), schema 2::

    {"schema": 2, "deployment", "run_id", "created_at", "entries": [...], "records": {stage: record}}

Schema 1 (no "schema" key: "stages_done" and untyped "outputs") is what pdlift wrote before the
records existed; it still loads (``from_dict``). A newer schema is refused with the reason.

Entries of kind ``client-token`` are no resources: each records that a request began a new token
generation (``identity.Generation``), before it was sent. They cost nothing, are never live and
are left out of the cost table; ``generations`` reads the latest one per request.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass, field, replace

from tasks.planning import records as rec
from tasks.planning.identity import Generation
from tasks.planning.records import Deployed, FabricVerdict, Fleet, GateResult, Handover, Reserved, StageRecord

SCHEMA_VERSION = 2
TOKEN_GENERATION = "client-token"


class LedgerFormatError(ValueError):
    """A stored ledger this version of pdlift cannot read."""


@dataclass(frozen=True)
class LedgerEntry:
    kind: str                 # placement-group | capacity-reservation | capacity-block | launch-template | instance
    resource_id: str
    stage: str
    zone: str = ""
    usd_per_hour: float = 0.0  # what it bills while it exists (an ODCR bills whether used or not)
    upfront_usd: float = 0.0
    started_at: str = ""
    ended_at: str = ""
    note: str = ""

    def cost(self, now: dt.datetime) -> float:
        if not self.started_at:
            return self.upfront_usd
        start = _parse(self.started_at)
        end = _parse(self.ended_at) if self.ended_at else now
        hours = max(0.0, (end - start).total_seconds() / 3600)
        return self.upfront_usd + hours * self.usd_per_hour


@dataclass(frozen=True)
class Ledger:
    deployment: str
    run_id: str
    created_at: str
    entries: tuple[LedgerEntry, ...] = ()
    records: dict[str, StageRecord] = field(default_factory=dict)

    def with_entry(self, entry: LedgerEntry) -> "Ledger":
        kept = tuple(e for e in self.entries if (e.kind, e.resource_id) != (entry.kind, entry.resource_id))
        return replace(self, entries=kept + (entry,))

    def ended(self, kind: str, resource_id: str, at: dt.datetime) -> "Ledger":
        entries = tuple(replace(e, ended_at=_fmt(at)) if (e.kind, e.resource_id) == (kind, resource_id)
                        and not e.ended_at else e for e in self.entries)
        return replace(self, entries=entries)

    def with_record(self, record: StageRecord) -> "Ledger":
        """The stage of ``record`` is done; later pipeline stages are not any more, unless the
        record is about the same resources as the one it replaces."""
        stage = rec.stage_of(record)
        before = self.records.get(stage)
        same = before is not None and rec.identity(before) == rec.identity(record)
        later = rec.PIPELINE[rec.PIPELINE.index(stage) + 1:] if stage in rec.PIPELINE and not same else ()
        kept = {s: r for s, r in self.records.items() if s != stage and s not in later}
        return replace(self, records={**kept, stage: record})

    @property
    def stages_done(self) -> tuple[str, ...]:
        """In pipeline order (then teardown), however the stored document ordered its keys."""
        return tuple(stage for stage in rec.STAGE_TYPES if stage in self.records)

    def reserved(self) -> Reserved | None:
        return self.records.get("reserve")  # type: ignore[return-value]

    def fleet(self) -> Fleet | None:
        """The run's current fleet: after the fabric stage's replacements, else as launched."""
        fabric: FabricVerdict | None = self.records.get("fabric")  # type: ignore[assignment]
        return fabric.fleet if fabric else self.records.get("launch")  # type: ignore[return-value]

    def deployed(self) -> Deployed | None:
        return self.records.get("deploy")  # type: ignore[return-value]

    def gate(self) -> GateResult | None:
        return self.records.get("benchmark")  # type: ignore[return-value]

    def handover(self) -> Handover | None:
        """A ``fleet`` update of this run's fleet: to which run, and how far it got."""
        return self.records.get("handover")  # type: ignore[return-value]

    def live(self, kind: str | None = None) -> list[LedgerEntry]:
        return [e for e in self.entries if not e.ended_at and (kind is None or e.kind == kind)]

    def to_dict(self) -> dict:
        return {"schema": SCHEMA_VERSION, "deployment": self.deployment, "run_id": self.run_id,
                "created_at": self.created_at, "entries": [asdict(e) for e in self.entries],
                "records": {stage: rec.to_dict(r) for stage, r in self.records.items()}}

    @staticmethod
    def from_dict(data: dict) -> "Ledger":
        """A stored ledger of schema 1 or 2; LedgerFormatError says why one cannot be read."""
        if not isinstance(data, dict):
            raise LedgerFormatError("a ledger is a JSON object")
        schema = data.get("schema", 1)
        if schema not in (1, SCHEMA_VERSION):
            raise LedgerFormatError(f"ledger schema {schema!r} is not one this pdlift reads (1 or "
                                    f"{SCHEMA_VERSION}): it was written by another version of pdlift")
        try:
            entries = tuple(LedgerEntry(**e) for e in data.get("entries", ()))
            records = (_v1_records(data) if schema == 1 else
                       {stage: rec.record_for(stage, r) for stage, r in (data.get("records") or {}).items()})
            return Ledger(data["deployment"], data["run_id"], data["created_at"], entries, records)
        except (KeyError, TypeError, ValueError) as e:
            raise LedgerFormatError(f"ledger of schema {schema} does not fit its format: {e}") from e


def _v1_records(data: dict) -> dict[str, StageRecord]:
    """Schema 1 stored each stage's output as the dict its task happened to build."""
    outputs, deployment = data.get("outputs") or {}, data["deployment"]
    out: dict[str, StageRecord] = {}
    for stage in data.get("stages_done", ()):
        old = outputs.get(stage)
        if old is None:
            continue  # done without an output: nothing to resume from, the stage runs again
        if stage == "fabric":
            fleet = out.get("launch")
            if fleet is None:
                raise ValueError("a fabric record without the launched fleet it validated")
            replaced = tuple(rec.Replacement(r["old"], r["new"]) for r in old.get("replaced", ()))
            out[stage] = FabricVerdict(bool(old["passed"]), old.get("failure"), float(old.get("seconds", 0.0)),
                                       int(old.get("passes", 0)), str(old.get("results", "")), replaced,
                                       fleet)  # type: ignore[arg-type]
        elif stage == "weights":
            out[stage] = rec.StagedWeights(tuple(
                rec.NodeWeights(node, int(n["bytes_total"]), int(n["bytes_fetched"]), float(n["seconds"]))
                for node, n in (old.get("nodes") or {}).items()))
        elif stage == "deploy":
            namespace, _, service = str(old.get("router_service", "")).rpartition("/")
            out[stage] = Deployed(deployment, old["colour"], old.get("live_colour"), old.get("engines_namespace", ""),
                                  namespace, service, dict(old.get("phases_s") or {}),
                                  float(old.get("bring_up_s", 0.0)), str(old.get("canary", "")),
                                  str(old.get("generation", "")))
        else:
            out[stage] = rec.record_for(stage, old)
    return out


def generation_entry(scope: str, generation: Generation, stage: str, why: str) -> LedgerEntry:
    """The record that ``scope``'s request begins ``generation`` (written before it is sent)."""
    at = _fmt(generation.started_at) if generation.started_at else ""
    return LedgerEntry(TOKEN_GENERATION, f"{scope}#{generation.number}", stage, started_at=at, ended_at=at, note=why)


def generations(ledger: Ledger) -> dict[str, Generation]:
    """The latest token generation of each request scope the ledger names (none: generation 0)."""
    out: dict[str, Generation] = {}
    for e in ledger.entries:
        if e.kind != TOKEN_GENERATION or "#" not in e.resource_id:
            continue
        scope, _, number = e.resource_id.rpartition("#")
        found = Generation(int(number), _parse(e.started_at) if e.started_at else None)
        if found.number > out.get(scope, Generation()).number:
            out[scope] = found
    return out


def spend_by_stage(ledger: Ledger, now: dt.datetime) -> dict[str, float]:
    out: dict[str, float] = {}
    for e in ledger.entries:
        out[e.stage] = out.get(e.stage, 0.0) + e.cost(now)
    return {k: round(v, 2) for k, v in out.items()}


def hourly_burn(ledger: Ledger) -> float:
    return round(sum(e.usd_per_hour for e in ledger.live()), 2)


def render_markdown(ledger: Ledger, now: dt.datetime) -> str:
    lines = [f"## Cost ledger: {ledger.deployment} run {ledger.run_id}", "",
             "| resource | kind | stage | zone | $/h | upfront $ | started | ended | cost $ |",
             "|---|---|---|---|---|---|---|---|---|"]
    for e in (e for e in ledger.entries if e.kind != TOKEN_GENERATION):
        lines.append(f"| {e.resource_id} | {e.kind} | {e.stage} | {e.zone} | {e.usd_per_hour:,.2f} | "
                     f"{e.upfront_usd:,.2f} | {e.started_at} | {e.ended_at or 'running'} | {e.cost(now):,.2f} |")
    lines += ["", "| stage | spend $ |", "|---|---|"]
    lines += [f"| {s} | {v:,.2f} |" for s, v in spend_by_stage(ledger, now).items()]
    lines += ["", f"Still billing: ${hourly_burn(ledger):,.2f}/h"]
    return "\n".join(lines) + "\n"


def _fmt(t: dt.datetime) -> str:
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse(s: str) -> dt.datetime:
    return dt.datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc)


def now_str(t: dt.datetime) -> str:
    return _fmt(t)


def parse_time(s: str) -> dt.datetime:
    return _parse(s)
