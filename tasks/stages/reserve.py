"""Stage 1: reserve capacity. The steps over the EC2 adapter, with the clock injected.

Converge, don't create: first adopt what this run already made (found by tags), then create only
what is missing. Each new resource id goes to the ledger (``record``) the moment it exists.

A Capacity Block is sold for a start in the future: it is ``payment-pending``, then
``scheduled`` until its StartDate, and refuses launches until then (EC2 User Guide, "View
Capacity Blocks"). This stage buys (or adopts) it, waits only for the payment, and reports when
it starts and ends (``Reserved.starts_at``/``ends_at``); waiting for the start is the pipeline's,
without holding a worker (``flows/pipeline.py``).

A reservation request whose token was already spent on a reservation that is gone now
(cancelled by a teardown, expired) starts a new token generation, recorded before the send, with
its EndDate counted from now (``identity.Generation``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

from blueprints.schema import Blueprint
from tasks.adapters.ec2_capacity import Reservation
from tasks.errors import CapacityUnavailable, RequestRejected
from tasks.planning import ec2_requests, identity
from blueprints.catalog import price
from tasks.planning.aws_errors import Action, classify
from tasks.planning.identity import Generation, RunIdentity
from tasks.planning.ledger import LedgerEntry, generation_entry, now_str
from tasks.planning.records import Reserved
from tasks.stages.clock import Clock, poll_until
from tasks.stages.ports import Capacity, Record

LIVE_STATES = ("active", "pending", "scheduled", "payment-pending", "assessing", "delayed")
GONE_STATES = ("cancelled", "expired", "failed", "payment-failed")
SCOPE = "reserve"  # the token generation of this run's reservation requests
SLACK_H = 1  # how much shorter than asked a reservation may be before it is reserved again from now
OFFERING_TRIES = 3  # an offering id is a quote: one that expired before the purchase is searched again


def preflight(bp: Blueprint, cap: Capacity) -> list[str]:
    """Checks before any spend; raises RequestRejected naming the fix. Returns notes for the log."""
    notes = []
    info = cap.instance_type_info(bp.aws.instance_type)
    efa = ((info.get("NetworkInfo") or {}).get("EfaInfo") or {}).get("MaximumEfaInterfaces")
    notes.append(f"{bp.aws.instance_type}: {info.get('VCpuInfo', {}).get('DefaultVCpus')} vCPUs, {efa} EFA")
    offered = [z for z in bp.aws.availability_zones if cap.offered_in_zone(bp.aws.instance_type, z)]
    if not offered:
        raise RequestRejected(f"{bp.aws.instance_type} is not offered in {', '.join(bp.aws.availability_zones)}. "
                              "Fix: aws.availability_zones")
    for zone in bp.aws.availability_zones:
        _, subnet_zone = cap.subnet(bp.aws.subnets[zone])
        if subnet_zone != zone:
            raise RequestRejected(f"subnet {bp.aws.subnets[zone]} is in {subnet_zone}, not {zone}. Fix: aws.subnets")
    _, self_ok = cap.security_group(bp.aws.security_group)
    if not self_ok:
        raise RequestRejected(f"security group {bp.aws.security_group} must allow all traffic to and from itself, "
                              "inbound and outbound (EFA needs it). Fix: add self-referencing all-traffic rules")
    vcpus = int(info.get("VCpuInfo", {}).get("DefaultVCpus", 0)) * bp.node_count
    quota = cap.p_vcpu_quota()
    if quota is not None and bp.aws.capacity.mode != "capacity-block" and quota < vcpus:
        raise RequestRejected(f"On-Demand P-instance vCPU quota is {quota:g}, the fleet needs {vcpus}. "
                              "Fix: request a quota increase, or use a Capacity Block")
    notes.append("vCPU quota: " + ("not available here" if quota is None else f"{quota:g} >= {vcpus}"))
    notes.append(f"AMI {cap.ami_from_ssm(bp.aws.eks.ami_ssm_parameter)} from {bp.aws.eks.ami_ssm_parameter}")
    return notes


def hourly_cost(bp: Blueprint) -> float:
    p = price(bp.aws.instance_type, bp.aws.region, bp.aws.hourly_price_usd)
    return p.usd_per_hour * bp.node_count if p else 0.0


def reserve(bp: Blueprint, run: RunIdentity, cap: Capacity, record: Record, clock: Clock = Clock(),
            generations: Mapping[str, Generation] | None = None) -> Reserved:
    """``generations``: the token generations the ledger recorded (``ledger.generations``)."""
    adopted = _adopt(run, cap)
    if adopted:
        return _adopt_it(bp, adopted, cap, record, clock)
    per_hour = hourly_cost(bp)
    if per_hour > bp.aws.capacity.max_hourly_usd:
        raise RequestRejected(f"{bp.node_count} x {bp.aws.instance_type} cost ${per_hour:,.2f}/h, above "
                              f"aws.capacity.max_hourly_usd ${bp.aws.capacity.max_hourly_usd:,.2f}. Fix: raise the limit")
    mode = bp.aws.capacity.mode
    if mode == "existing":
        return _use_existing(bp, cap)
    if mode == "capacity-block":
        return _buy_block(bp, run, cap, record, clock)
    return _odcr_with_failover(bp, run, cap, record, clock, (generations or {}).get(SCOPE, Generation()))


def _adopt(run: RunIdentity, cap: Capacity) -> Reservation | None:
    found = [r for r in cap.reservations(filters=identity.run_filters(run.deployment, run.run_id))
             if r.state in LIVE_STATES]
    return found[0] if found else None


def _adopt_it(bp: Blueprint, r: Reservation, cap: Capacity, record: Record, clock: Clock) -> Reserved:
    _record_reservation(bp, r, record, clock)
    return _reserved(_wait_usable(bp, cap, r.reservation_id, clock), (), True)


def _reserved(r: Reservation, blocked: tuple[str, ...], adopted: bool) -> Reserved:
    """What the launch needs, placement group included: the reservation was made in it
    (PlacementGroupArn), and a launch template made after a crash must name it too."""
    return Reserved(r.reservation_id, r.zone, r.placement_group, r.reservation_type == "capacity-block",
                    blocked, adopted, _when(r.start_date), _when(r.end_date))


def _when(t: dt.datetime | None) -> str:
    return now_str(t) if t else ""


def _use_existing(bp: Blueprint, cap: Capacity) -> Reserved:
    rid = bp.aws.capacity.reservation_id or ""
    r = cap.reservation(rid)
    problems = []
    if r is None:
        raise RequestRejected(f"reservation {rid} not found. Fix: aws.capacity.reservation_id")
    block = r.reservation_type == "capacity-block"
    # A Capacity Block that has not begun is "scheduled" with zero available (it still is the
    # run's capacity); its size is then its total.
    if r.state != "active" and not (block and r.state == "scheduled"):
        problems.append(f"state is {r.state}, not active")
    if r.instance_type != bp.aws.instance_type:
        problems.append(f"it reserves {r.instance_type}, not {bp.aws.instance_type}")
    if r.tenancy != "default":
        problems.append(f"tenancy {r.tenancy}: launches must copy it (pdlift launches default tenancy)")
    if r.zone not in bp.aws.availability_zones:
        problems.append(f"it is in {r.zone}, not in {', '.join(bp.aws.availability_zones)}")
    free = r.total if r.state == "scheduled" else r.available
    if free < bp.node_count:
        problems.append(f"{free} instances available, {bp.node_count} needed")
    if problems:
        raise RequestRejected(f"reservation {rid} cannot be used: " + "; ".join(problems))
    return _reserved(r, (), True)


def _buy_block(bp: Blueprint, run: RunIdentity, cap: Capacity, record: Record, clock: Clock) -> Reserved:
    for attempt in range(1, OFFERING_TRIES + 1):
        offerings = cap.capacity_block_offerings(ec2_requests.capacity_block_offerings_request(bp, clock.now()))
        choice = ec2_requests.choose_capacity_block(bp, offerings)
        if choice.offering is None:
            raise CapacityUnavailable(f"no Capacity Block bought: {choice.reason}")
        # PurchaseCapacityBlock has no ClientToken: look again right before buying (tags of this run).
        adopted = _adopt(run, cap)
        if adopted:
            return _adopt_it(bp, adopted, cap, record, clock)
        request = ec2_requests.purchase_capacity_block_request(run, choice.offering["CapacityBlockOfferingId"])
        try:
            r = cap.purchase_capacity_block(request)
        except RequestRejected as e:
            if classify(e.code or "") is Action.DESCRIBE_AGAIN and attempt < OFFERING_TRIES:
                continue  # the quote lapsed between search and purchase: search again
            raise
        record(LedgerEntry("capacity-block", r.reservation_id, "reserve", r.zone, 0.0,
                           float(choice.offering.get("UpfrontFee", 0)), now_str(clock.now()),
                           note=f"paid upfront; cannot be cancelled; usable from {_when(r.start_date)} "
                                f"until its EndDate {_when(r.end_date)}"))
        return _reserved(_wait_usable(bp, cap, r.reservation_id, clock), (), False)
    raise AssertionError("unreachable")


def _odcr_with_failover(bp: Blueprint, run: RunIdentity, cap: Capacity, record: Record, clock: Clock,
                        generation: Generation) -> Reserved:
    pg = cap.create_placement_group(ec2_requests.placement_group_request(run))
    record(LedgerEntry("placement-group", pg["GroupName"], "reserve", started_at=now_str(clock.now())))
    blocked: list[str] = []
    if _ends_short(bp, run, generation, clock.now()):
        generation = _next_generation(generation, record, clock, "the reservation would end less than "
                                      f"{bp.aws.capacity.duration_hours} h from now: reserve again from now")
    for zone in bp.aws.availability_zones:
        if not cap.offered_in_zone(bp.aws.instance_type, zone):
            blocked.append(f"{zone}: {bp.aws.instance_type} not offered")
            continue
        try:
            r = cap.create_reservation(ec2_requests.capacity_reservation_request(
                bp, run, zone, pg.get("GroupArn"), generation))
            if r.state in GONE_STATES:
                # The token replayed a reservation of this run that is gone (EC2 answers a known
                # token with its original result, whatever became of it): a new generation.
                generation = _next_generation(generation, record, clock, f"{r.reservation_id} is {r.state}")
                r = cap.create_reservation(ec2_requests.capacity_reservation_request(
                    bp, run, zone, pg.get("GroupArn"), generation))
        except CapacityUnavailable as e:
            blocked.append(f"{zone}: {e.code}")
            continue
        _record_reservation(bp, r, record, clock)
        return _reserved(_wait_usable(bp, cap, r.reservation_id, clock), tuple(blocked), False)
    raise CapacityUnavailable(f"no capacity for {bp.node_count} x {bp.aws.instance_type} in any AZ: "
                              + "; ".join(blocked) + ". Try later, other AZs, or a Capacity Block")


def _ends_short(bp: Blueprint, run: RunIdentity, generation: Generation, now: dt.datetime) -> bool:
    """Whether this generation's EndDate, fixed when it began, would hold the capacity for an
    hour or more less than ``duration_hours`` from now (or is past): the run (or this generation)
    began long ago, so reserving now is a new attempt, counted from now. The hour of slack keeps
    retries soon after the first send on the same token (the EndDate is rounded to the hour, plus
    one). A fixed ``end_time`` is the blueprint's to keep."""
    cap = bp.aws.capacity
    if cap.end_time or not cap.duration_hours:
        return False
    left = ec2_requests.reservation_end(bp, run, generation) - now
    return left < dt.timedelta(hours=cap.duration_hours - SLACK_H)


def _next_generation(generation: Generation, record: Record, clock: Clock, why: str) -> Generation:
    """Begin the next token generation, in the ledger before any request carries it."""
    following = generation.next(clock.now())
    record(generation_entry(SCOPE, following, "reserve", why))
    return following


def _record_reservation(bp: Blueprint, r: Reservation, record: Record, clock: Clock) -> None:
    block = r.reservation_type == "capacity-block"
    record(LedgerEntry("capacity-block" if block else "capacity-reservation", r.reservation_id, "reserve", r.zone,
                       0.0 if block else hourly_cost(bp), 0.0, now_str(clock.now()),
                       note="bills at the On-Demand rate while active, used or not" if not block else ""))


def _wait_usable(bp: Blueprint, cap: Capacity, rid: str, clock: Clock) -> Reservation:
    """The reservation once it is the run's: an ODCR when active (or pending with its slots), a
    Capacity Block once paid (scheduled or active; its start is waited for elsewhere)."""
    seen: list[Reservation | None] = [None]

    def probe() -> Reservation | None:
        r = seen[0] = cap.reservation(rid)
        if r and r.state in GONE_STATES:
            raise CapacityUnavailable(f"reservation {rid} is {r.state}", zone=r.zone, code=r.state)
        if r and r.reservation_type == "capacity-block":
            return r if r.state in ("scheduled", "active") else None  # payment-pending: not paid yet
        if r and (r.state == "active" or (r.state == "pending" and (r.available >= bp.node_count or _in_use(r)))):
            return r  # a pending reservation is usable once its slots show up (docs/sources.md#odcr-pending-usable)
        return None

    return poll_until(probe, bound_s=bp.aws.capacity.wait_ready_s, clock=clock, interval_s=1.0, max_interval_s=15.0,
                      what=lambda: f"reservation {rid} not usable after {bp.aws.capacity.wait_ready_s}s (state "
                                   f"{seen[0].state if seen[0] else 'missing'}); it is recorded: tear down or re-run")


def _in_use(r: Reservation) -> int:
    return max(0, r.total - r.available)
