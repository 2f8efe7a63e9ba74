"""The run ledger: every resource a run made, the moment it exists, and what it costs. Pure.

A ledger is plain data (JSON-able), saved by the flows after each change, so a crashed run can
be resumed or torn down, and each run can report its spend per stage.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass, field, replace


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
    stages_done: tuple[str, ...] = ()
    outputs: dict = field(default_factory=dict)

    def with_entry(self, entry: LedgerEntry) -> "Ledger":
        kept = tuple(e for e in self.entries if (e.kind, e.resource_id) != (entry.kind, entry.resource_id))
        return replace(self, entries=kept + (entry,))

    def ended(self, kind: str, resource_id: str, at: dt.datetime) -> "Ledger":
        entries = tuple(replace(e, ended_at=_fmt(at)) if (e.kind, e.resource_id) == (kind, resource_id)
                        and not e.ended_at else e for e in self.entries)
        return replace(self, entries=entries)

    def with_stage(self, stage: str, output: dict | None = None) -> "Ledger":
        done = self.stages_done if stage in self.stages_done else self.stages_done + (stage,)
        outputs = {**self.outputs, stage: output} if output is not None else self.outputs
        return replace(self, stages_done=done, outputs=outputs)

    def live(self, kind: str | None = None) -> list[LedgerEntry]:
        return [e for e in self.entries if not e.ended_at and (kind is None or e.kind == kind)]

    def to_dict(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_dict(data: dict) -> "Ledger":
        entries = tuple(LedgerEntry(**e) for e in data.get("entries", ()))
        return Ledger(data["deployment"], data["run_id"], data["created_at"], entries,
                      tuple(data.get("stages_done", ())), dict(data.get("outputs", {})))


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
    for e in ledger.entries:
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
