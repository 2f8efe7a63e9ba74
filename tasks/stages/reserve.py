"""Stage 1: reserve capacity. The steps over the EC2 adapter, with the clock injected.

Converge, don't create: first adopt what this run already made (found by tags), then create only
what is missing. Each new resource id goes to the ledger (``record``) the moment it exists.
"""

from __future__ import annotations

from blueprints.schema import Blueprint
from tasks.adapters.ec2_capacity import Reservation
from tasks.errors import CapacityUnavailable, RequestRejected
from tasks.planning import ec2_requests, identity
from blueprints.catalog import price
from tasks.planning.identity import RunIdentity
from tasks.planning.ledger import LedgerEntry, now_str
from tasks.planning.records import Reserved
from tasks.stages.clock import Clock, poll_until
from tasks.stages.ports import Capacity, Record

LIVE_STATES = ("active", "pending", "scheduled", "payment-pending", "assessing", "delayed")


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


def reserve(bp: Blueprint, run: RunIdentity, cap: Capacity, record: Record, clock: Clock = Clock()) -> Reserved:
    adopted = _adopt(run, cap)
    if adopted:
        _record_reservation(bp, adopted, record, clock)
        _wait_usable(bp, cap, adopted.reservation_id, clock)
        return Reserved(adopted.reservation_id, adopted.zone, None, adopted.reservation_type == "capacity-block",
                        (), True)
    per_hour = hourly_cost(bp)
    if per_hour > bp.aws.capacity.max_hourly_usd:
        raise RequestRejected(f"{bp.node_count} x {bp.aws.instance_type} cost ${per_hour:,.2f}/h, above "
                              f"aws.capacity.max_hourly_usd ${bp.aws.capacity.max_hourly_usd:,.2f}. Fix: raise the limit")
    mode = bp.aws.capacity.mode
    if mode == "existing":
        return _use_existing(bp, cap)
    if mode == "capacity-block":
        return _buy_block(bp, run, cap, record, clock)
    return _odcr_with_failover(bp, run, cap, record, clock)


def _adopt(run: RunIdentity, cap: Capacity) -> Reservation | None:
    found = [r for r in cap.reservations(filters=identity.run_filters(run.deployment, run.run_id))
             if r.state in LIVE_STATES]
    return found[0] if found else None


def _use_existing(bp: Blueprint, cap: Capacity) -> Reserved:
    rid = bp.aws.capacity.reservation_id or ""
    r = cap.reservation(rid)
    problems = []
    if r is None:
        raise RequestRejected(f"reservation {rid} not found. Fix: aws.capacity.reservation_id")
    if r.state != "active":
        problems.append(f"state is {r.state}, not active")
    if r.instance_type != bp.aws.instance_type:
        problems.append(f"it reserves {r.instance_type}, not {bp.aws.instance_type}")
    if r.tenancy != "default":
        problems.append(f"tenancy {r.tenancy}: launches must copy it (pdlift launches default tenancy)")
    if r.zone not in bp.aws.availability_zones:
        problems.append(f"it is in {r.zone}, not in {', '.join(bp.aws.availability_zones)}")
    if r.available < bp.node_count:
        problems.append(f"{r.available} instances available, {bp.node_count} needed")
    if problems:
        raise RequestRejected(f"reservation {rid} cannot be used: " + "; ".join(problems))
    return Reserved(rid, r.zone, None, r.reservation_type == "capacity-block", (), True)


def _buy_block(bp: Blueprint, run: RunIdentity, cap: Capacity, record: Record, clock: Clock) -> Reserved:
    offerings = cap.capacity_block_offerings(ec2_requests.capacity_block_offerings_request(bp, clock.now()))
    choice = ec2_requests.choose_capacity_block(bp, offerings)
    if choice.offering is None:
        raise CapacityUnavailable(f"no Capacity Block bought: {choice.reason}")
    # PurchaseCapacityBlock has no ClientToken: look again right before buying (tags of this run).
    if _adopt(run, cap):
        return reserve(bp, run, cap, record, clock)
    request = ec2_requests.purchase_capacity_block_request(run, choice.offering["CapacityBlockOfferingId"])
    r = cap.purchase_capacity_block(request)
    record(LedgerEntry("capacity-block", r.reservation_id, "reserve", r.zone, 0.0,
                       float(choice.offering.get("UpfrontFee", 0)), now_str(clock.now()),
                       note="paid upfront; cannot be cancelled; ends at its EndDate"))
    return Reserved(r.reservation_id, r.zone, None, True, (), False)


def _odcr_with_failover(bp: Blueprint, run: RunIdentity, cap: Capacity, record: Record, clock: Clock) -> Reserved:
    pg = cap.create_placement_group(ec2_requests.placement_group_request(run))
    record(LedgerEntry("placement-group", pg["GroupName"], "reserve", started_at=now_str(clock.now())))
    blocked: list[str] = []
    for zone in bp.aws.availability_zones:
        if not cap.offered_in_zone(bp.aws.instance_type, zone):
            blocked.append(f"{zone}: {bp.aws.instance_type} not offered")
            continue
        try:
            r = cap.create_reservation(ec2_requests.capacity_reservation_request(bp, run, zone, pg.get("GroupArn")))
        except CapacityUnavailable as e:
            blocked.append(f"{zone}: {e.code}")
            continue
        _record_reservation(bp, r, record, clock)
        _wait_usable(bp, cap, r.reservation_id, clock)
        return Reserved(r.reservation_id, zone, pg["GroupName"], False, tuple(blocked), False)
    raise CapacityUnavailable(f"no capacity for {bp.node_count} x {bp.aws.instance_type} in any AZ: "
                              + "; ".join(blocked) + ". Try later, other AZs, or a Capacity Block")


def _record_reservation(bp: Blueprint, r: Reservation, record: Record, clock: Clock) -> None:
    block = r.reservation_type == "capacity-block"
    record(LedgerEntry("capacity-block" if block else "capacity-reservation", r.reservation_id, "reserve", r.zone,
                       0.0 if block else hourly_cost(bp), 0.0, now_str(clock.now()),
                       note="bills at the On-Demand rate while active, used or not" if not block else ""))


def _wait_usable(bp: Blueprint, cap: Capacity, rid: str, clock: Clock) -> Reservation:
    seen: list[Reservation | None] = [None]

    def probe() -> Reservation | None:
        r = seen[0] = cap.reservation(rid)
        if r and (r.state == "active" or (r.state == "pending" and (r.available >= bp.node_count or _in_use(r)))):
            return r  # a pending reservation is usable once its slots show up (docs/sources.md#odcr-pending-usable)
        if r and r.state in ("failed", "cancelled", "expired"):
            raise CapacityUnavailable(f"reservation {rid} is {r.state}", zone=r.zone, code=r.state)
        return None

    return poll_until(probe, bound_s=bp.aws.capacity.wait_ready_s, clock=clock, interval_s=1.0, max_interval_s=15.0,
                      what=lambda: f"reservation {rid} not usable after {bp.aws.capacity.wait_ready_s}s (state "
                                   f"{seen[0].state if seen[0] else 'missing'}); it is recorded: tear down or re-run")


def _in_use(r: Reservation) -> int:
    return max(0, r.total - r.available)
