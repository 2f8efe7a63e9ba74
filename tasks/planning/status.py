"""What a deployment has running now and what it costs: the `pdlift status` screen. Pure.

Composed from what the state store holds (every run's ledger, lease and last gate report) and what
the live systems answered (the reservations' state and end date from EC2, the colour production's
Service selects and its engines' images from Kubernetes). A system that did not answer is named
in ``unreachable`` and its fields are left empty: the screen is for the moment something is wrong.
"""

from __future__ import annotations

import datetime as dt
import json
import shlex
from dataclasses import asdict, dataclass, field

from tasks.planning.lease import Lease
from tasks.planning.ledger import TOKEN_GENERATION, Ledger, hourly_burn
from tasks.planning.records import PIPELINE


@dataclass(frozen=True)
class Reservation:
    """A reservation as EC2 describes it now (empty strings when EC2 did not answer)."""
    reservation_id: str
    state: str = ""
    ends_at: str = ""          # ISO 8601; "" for an open-ended ODCR


@dataclass(frozen=True)
class LiveEngines:
    """The pods production's Service selects, as Kubernetes reports them."""
    colour: str | None
    # (spec image, the digest the kubelet pulled: containerStatuses[].imageID) of each engine
    # container, as pairs: prefill and decode, or a half-rolled role, may run different images.
    images: tuple[tuple[str, str], ...] = ()
    ready: int = 0
    pods: int = 0


@dataclass(frozen=True)
class GateSeen:
    """A run's last gate report (runs/<deployment>/<run>/bench/gate.json)."""
    run_id: str
    outcome: str
    reasons: tuple[str, ...]
    report_key: str            # the report's key in the state store
    judged_at: str = ""        # gate.json's own time ("" in a report written before it had one)
    flow_run_id: str = ""      # the flow run that judged


@dataclass(frozen=True)
class Tagged:
    """A resource EC2 lists under the deployment's tags: what `pdlift teardown` releases."""
    kind: str
    resource_id: str
    run_id: str


@dataclass(frozen=True)
class FleetView:
    run_id: str
    zone: str
    reservation_id: str
    reservation_state: str
    reservation_ends_at: str
    nodes: tuple[str, ...]     # "<node name> <instance id> <role>"
    usd_per_hour: float
    spend_usd: float
    billing: tuple[str, ...]   # "<kind> <id> $<h>/h": what the ledger says bills
    teardown: str              # the exact command


@dataclass(frozen=True)
class InFlight:
    run_id: str
    stage: str                 # the first pipeline stage the run has not finished, else "update"
    worker: str
    flow_run_id: str
    lease_expires_at: str


@dataclass(frozen=True)
class Status:
    deployment: str
    blueprint_path: str
    store: str
    at: str
    fleets: tuple[FleetView, ...]
    live_colour: str | None
    images: tuple[tuple[str, str], ...]  # (image, image id) pairs of the live engines
    engines_ready: str         # "4/4 engine pods ready"
    promoted_at: str           # when production first answered from the live colour; "" if unknown
    promoted_by_run: str
    gate: GateSeen | None
    gate_link: str
    in_flight: tuple[InFlight, ...]
    usd_per_hour: float
    spend_usd: float
    teardown: str
    releases: tuple[str, ...] | None  # what a teardown would release, by tag; None: EC2 did not answer
    untracked: tuple[str, ...]        # tagged for this deployment, in no ledger: a leak to look at
    unreachable: tuple[str, ...] = field(default=())
    kube_answered: bool = True  # False: the live colour is unknown, not absent

    @property
    def empty(self) -> bool:
        """Nothing runs, as far as every system asked could tell (one that did not answer: not empty)."""
        return (not self.fleets and not self.in_flight and self.live_colour is None and self.kube_answered
                and self.releases == ())


def teardown_command(blueprint_path: str, run_id: str | None = None) -> str:
    return shlex.join(["pdlift", "teardown", blueprint_path] + (["--run-id", run_id] if run_id else []))


def stage_in_flight(ledger: Ledger | None) -> str:
    done = set(ledger.stages_done) if ledger else set()
    return next((s for s in PIPELINE if s not in done), "update")


def compose(deployment: str, blueprint_path: str, store: str, now: dt.datetime, ledgers: list[Ledger],
            leases: list[Lease], reservations: dict[str, Reservation], engines: LiveEngines | None,
            gates: list[GateSeen], ui_url: str | None, tagged: list[Tagged] | None,
            unreachable: tuple[str, ...] = (), kube_answered: bool = True) -> Status:
    """``ledgers`` oldest first; ``engines`` None when Kubernetes was not asked (nothing deployed)
    or did not answer (``kube_answered`` False); ``tagged`` None when EC2 did not answer."""
    fleets = tuple(_fleet(ledger, blueprint_path, now, reservations) for ledger in ledgers if ledger.live())
    by_run = {ledger.run_id: ledger for ledger in ledgers}
    in_flight = tuple(InFlight(lease.run_id, stage_in_flight(by_run.get(lease.run_id)), lease.worker,
                               lease.flow_run_id, lease.expires_at)
                      for lease in leases if not lease.expired(now))
    live = engines.colour if engines else None
    promoted_at, promoted_by = _promotion(ledgers, live)
    gate = latest_gate(gates)
    ready = f"{engines.ready}/{engines.pods} engine pods ready" if engines and engines.pods else ""
    link = f"{ui_url.rstrip('/')}/runs/flow-run/{gate.flow_run_id}" if ui_url and gate and gate.flow_run_id else ""
    return Status(deployment, blueprint_path, store, _iso(now), fleets, live,
                  engines.images if engines else (), ready, promoted_at,
                  promoted_by, gate, link, in_flight, float(round(sum(f.usd_per_hour for f in fleets), 2)),
                  float(round(sum(sum(e.cost(now) for e in ledger.entries if e.kind != TOKEN_GENERATION)
                                  for ledger in ledgers), 2)),
                  teardown_command(blueprint_path),
                  None if tagged is None else tuple(_release_line(t) for t in tagged),
                  _untracked(ledgers, tagged), tuple(unreachable), kube_answered)


def latest_gate(gates: list[GateSeen]) -> GateSeen | None:
    """The latest verdict by its own time (a resumed older run may judge after a newer one);
    reports without a time count as older than any with one, in the order given."""
    return max(reversed(gates), key=lambda g: g.judged_at, default=None) if gates else None


def _release_line(t: Tagged) -> str:
    line = f"{t.kind} {t.resource_id} (run {t.run_id})"
    if t.kind == "capacity-block":  # teardown keeps it: docs/sources.md, a block cannot be cancelled
        return line + ": kept, a Capacity Block cannot be cancelled; it bills until it ends"
    return line


def _untracked(ledgers: list[Ledger], tagged: list[Tagged] | None) -> tuple[str, ...]:
    recorded = {e.resource_id for ledger in ledgers for e in ledger.live()}
    return tuple(f"{t.kind} {t.resource_id} (run {t.run_id or '?'})" for t in tagged or ()
                 if t.resource_id not in recorded)


def _fleet(ledger: Ledger, blueprint_path: str, now: dt.datetime, reservations: dict[str, Reservation]) -> FleetView:
    reserved, fleet = ledger.reserved(), ledger.fleet()
    rid = reserved.reservation_id if reserved else ""
    seen = reservations.get(rid, Reservation(rid))
    # What bills, whatever stage recorded it (a launch cut off mid-way has instances, no fleet record).
    known = {n.instance_id: n for n in (fleet.nodes if fleet else ())}
    nodes = tuple(f"{known[e.resource_id].node_name or known[e.resource_id].address} {e.resource_id} "
                  f"{known[e.resource_id].role}" if e.resource_id in known else f"(not joined) {e.resource_id} -"
                  for e in ledger.live("instance"))
    billing = tuple(f"{e.kind} {e.resource_id} ${e.usd_per_hour:,.2f}/h" for e in ledger.live()
                    if e.kind != TOKEN_GENERATION)
    return FleetView(ledger.run_id, reserved.zone if reserved else "", rid, seen.state,
                     seen.ends_at or (reserved.ends_at if reserved else ""), nodes, hourly_burn(ledger),
                     round(sum(e.cost(now) for e in ledger.entries if e.kind != TOKEN_GENERATION), 2), billing,
                     teardown_command(blueprint_path, ledger.run_id))


def _promotion(ledgers: list[Ledger], live: str | None) -> tuple[str, str]:
    """When production first answered from the live colour, by the latest run that promoted it."""
    for ledger in reversed(ledgers):
        gate = ledger.gate()
        promotion = gate.promotion if gate else None
        if promotion and live and promotion.colour == live:
            when = dt.datetime.fromtimestamp(promotion.answered_at, dt.timezone.utc) if promotion.answered_at else None
            return (_iso(when) if when else ""), ledger.run_id
    return "", ""


def _iso(t: dt.datetime) -> str:
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def to_dict(status: Status) -> dict:
    """Plain JSON data (lists, not tuples): what `pdlift status --json` prints."""
    return json.loads(json.dumps({**asdict(status), "empty": status.empty}))


def render_text(status: Status) -> str:
    s = status
    lines = [f"{s.deployment}  ({s.blueprint_path}; state store {s.store}; at {s.at})"]
    if s.empty:
        lines += ["  nothing running: no fleet billing, no live colour, no run in flight, nothing tagged for it",
                  f"  spend so far: ${s.spend_usd:,.2f}"]
        return "\n".join(lines + _unreachable(s))
    lines.append(f"  billing now: {_billing(s)}   spend so far: ${s.spend_usd:,.2f}")
    for f in s.fleets:
        ends = f"ends {f.reservation_ends_at}" if f.reservation_ends_at else "no end date"
        lines += [f"  fleet of run {f.run_id}: {len(f.nodes)} node(s) in {f.zone or '?'}; reservation "
                  f"{f.reservation_id or 'none'} {f.reservation_state or '(state unknown)'}, {ends}; "
                  f"${f.usd_per_hour:,.2f}/h, ${f.spend_usd:,.2f} so far"]
        lines += [f"    node {n}" for n in f.nodes]
    lines.append(f"  live colour: {_live(s)}" + (f"; {s.engines_ready}" if s.engines_ready else ""))
    for image, image_id in s.images:
        lines.append(f"    image {image}" + (f" (running {image_id})" if image_id and image_id != image else ""))
    if s.promoted_at or s.promoted_by_run:
        lines.append(f"    promoted {s.promoted_at or '(time not recorded)'} by run {s.promoted_by_run}")
    if s.gate:
        lines.append(f"  last gate: {s.gate.outcome} (run {s.gate.run_id}, {s.gate.judged_at or 'time not recorded'})"
                     + (f": {s.gate.reasons[0]}" if s.gate.reasons else ""))
        lines.append(f"    report {s.store}/{s.gate.report_key}" + (f"  run {s.gate_link}" if s.gate_link else ""))
    else:
        lines.append("  last gate: none recorded")
    lines += [f"  in flight: run {r.run_id} at {r.stage} (worker {r.worker}, flow run {r.flow_run_id or '-'}, "
              f"lease until {r.lease_expires_at})" for r in s.in_flight] or ["  in flight: nothing"]
    if s.releases is None:
        lines.append("  a teardown would release: unknown (EC2 did not answer); the ledgers say:")
        lines += [f"    {b}" for f in s.fleets for b in f.billing] or ["    nothing billing"]
    else:
        lines.append("  a teardown would release (found by tag):")
        lines += [f"    {r}" for r in s.releases] or ["    nothing"]
    lines += [f"  untracked (tagged for {s.deployment}, in no ledger): {u}" for u in s.untracked]
    lines.append(f"  teardown: {s.teardown}")
    return "\n".join(lines + _unreachable(s))


def _billing(s: Status) -> str:
    """The ledgers' hourly total; tagged resources in no ledger have no price pdlift knows."""
    known = f"${s.usd_per_hour:,.2f}/h"
    return known + (f" + {len(s.untracked)} untracked resource(s) not priced" if s.untracked else "")


def _live(s: Status) -> str:
    if s.live_colour:
        return s.live_colour
    return "none (production's Service selects no colour)" if s.kube_answered else "unknown (Kubernetes did not answer)"


def _unreachable(s: Status) -> list[str]:
    return [f"  not answered: {u}" for u in s.unreachable]


def render_markdown(status: Status) -> str:
    s = status
    out = [f"## {s.deployment}: status at {s.at}", "",
           f"Billing now **{_billing(s)}**, spend so far **${s.spend_usd:,.2f}**. "
           f"Teardown: `{s.teardown}`", ""]
    if s.fleets:
        out += ["| fleet run | nodes | zone | reservation | state | ends | $/h | spend $ |",
                "|---|---|---|---|---|---|---|---|"]
        out += [f"| {f.run_id} | {len(f.nodes)} | {f.zone} | {f.reservation_id} | {f.reservation_state} | "
                f"{f.reservation_ends_at or '-'} | {f.usd_per_hour:,.2f} | {f.spend_usd:,.2f} |" for f in s.fleets]
        out.append("")
    out.append(f"- live colour: **{_live(s)}**" + (f" ({s.engines_ready})" if s.engines_ready else ""))
    out += [f"- image `{image}`" + (f" (running `{image_id}`)" if image_id and image_id != image else "")
            for image, image_id in s.images]
    if s.promoted_by_run:
        out.append(f"- promoted {s.promoted_at or '(time not recorded)'} by run {s.promoted_by_run}")
    if s.gate:
        link = f" ([report]({s.gate_link}))" if s.gate_link else ""
        out.append(f"- last gate: **{s.gate.outcome}** (run {s.gate.run_id}, {s.gate.judged_at or 'time not recorded'})"
                   f"{link}")
    if s.releases is not None:
        out += [f"- a teardown would release: {r}" for r in s.releases]
    out += [f"- in flight: run {r.run_id} at **{r.stage}** (worker {r.worker})" for r in s.in_flight]
    out += [f"- untracked: {u}" for u in s.untracked]
    out += [f"- not answered: {u}" for u in s.unreachable]
    return "\n".join(out) + "\n"
