"""`pdlift plan`: what a blueprint will need, create and cost, before anything is touched.

Pure: ``make_plan(blueprint) -> Plan``. Rendering lives in ``plan_render``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from blueprints.rules import gpus_per_node
from blueprints.schema import Blueprint
from tasks.planning import capacity_math
from blueprints.catalog import instance_type, price
from tasks.errors import ConfigError
from tasks.planning import update_plan
from tasks.planning.manifests import render_stack
from tasks.planning.strategy import StrategyRefused
from tasks.planning.timeline import Timeline, project
from tasks.planning.gate_sizing import GateSize, size_gate

TCP_SLOWDOWN = 100  # KV over TCP instead of EFA: assumed ~100x slower (docs/sources.md#efa-tcp-fallback)
PD_WORTH_IT_MAX_CONCURRENCY = 8


@dataclass(frozen=True)
class ScenarioFit:
    scenario: str
    context_tokens: int
    kv_gb_per_request: float
    kv_transfer_ms: float
    prefill_max_sequences: int
    decode_max_sequences: int
    max_target_concurrency: int


@dataclass(frozen=True)
class Cost:
    instance_type: str
    nodes: int
    usd_per_node_hour: float | None
    usd_per_hour: float | None
    expected_hours: float
    usd_per_run: float | None
    price_source: str
    price_as_of: str
    capacity_mode: str
    upfront_fee_usd_max: float
    note: str


PLAN_FORMAT_VERSION = 1  # "timeline" added; cost.expected_hours is now the projected run


@dataclass(frozen=True)
class Plan:
    blueprint: str
    model: str
    weights_gb: float
    kv_bytes_per_token: float
    gpus_per_node: int
    gpu_memory_gb: float
    roles: list[dict]
    scenarios: list[ScenarioFit]
    resources: list[str]
    cost: Cost
    timeline: Timeline
    warnings: list[str] = field(default_factory=list)
    # How a redeploy or rollout replaces the live colour on this fleet (tasks/planning/update_plan.py).
    updates: dict = field(default_factory=dict)
    # Whether the gate can decide within its load (tasks/planning/gate_sizing.py).
    gate: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """Stable machine output: field names only ever get added, under a format version."""
        return {"format_version": PLAN_FORMAT_VERSION, **asdict(self)}


def _finite(value):
    """JSON has no infinity: a margin never certifiable says "never"."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return "never" if isinstance(value, float) and value == float("inf") else value


def gate_warnings(sized: GateSize, allowed: bool) -> list[str]:
    """One line per check the gate cannot decide within its load (``pdlift validate`` refuses them
    unless ``gate.allow_undecidable``)."""
    lead = "gate (allowed by gate.allow_undecidable): " if allowed else "gate cannot decide: "
    return [lead + c.why for c in sized.undecidable]


def make_plan(bp: Blueprint) -> Plan:
    gpn = gpus_per_node(bp) or 0
    known = instance_type(bp.aws.instance_type)
    gpu_gb = bp.topology.gpu_memory_gb or (known.gpu_memory_gb if known else 0.0)
    util, kv_dtype = bp.engine.gpu_memory_utilization, bp.engine.kv_cache_dtype
    p, d = bp.topology.prefill, bp.topology.decode
    prefill = capacity_math.prefill_memory(bp.model, kv_dtype, p.tp, p.pp, gpu_gb, util)
    decode = capacity_math.decode_memory(bp.model, kv_dtype, d.dp, d.ep, d.tp, gpu_gb, util)
    kv_tok = capacity_math.kv_bytes_per_token(bp.model, kv_dtype)
    scenarios = [_scenario_fit(bp, s, prefill, decode, kv_tok) for s in bp.benchmark.scenarios]
    dense, expert = capacity_math.weight_bytes(bp.model)
    per_hour = price(bp.aws.instance_type, bp.aws.region, bp.aws.hourly_price_usd)
    timeline = project(bp, (dense + expert) / 1e9, per_hour.usd_per_hour * bp.node_count if per_hour else None)
    cost = _cost(bp, timeline.expected_s / 3600)
    updates, update_warnings = _updates(bp, timeline, gpn)
    sized = size_gate(bp)
    return Plan(
        blueprint=bp.name,
        model=bp.model.name,
        weights_gb=(dense + expert) / 1e9,
        kv_bytes_per_token=kv_tok,
        gpus_per_node=gpn,
        gpu_memory_gb=gpu_gb,
        roles=[_role_dict(prefill, p.nodes, f"tp{p.tp} x pp{p.pp}"),
               _role_dict(decode, d.nodes, f"dp{d.dp} / ep{d.ep} / tp{d.tp}")],
        scenarios=scenarios,
        resources=_resources(bp),
        cost=cost,
        timeline=timeline,
        warnings=[*_warnings(bp, prefill, decode, scenarios, cost, gpn, gpu_gb), *timeline.warnings,
                  *update_warnings, *gate_warnings(sized, bp.gate.allow_undecidable)],
        updates=updates,
        gate=_finite(asdict(sized)),
    )


def _updates(bp: Blueprint, timeline: Timeline, gpn: int) -> tuple[dict, list[str]]:
    """The strategy auto takes for a redeploy on this fleet, recreate's downtime estimate and
    fleet's extra fleet-hours."""
    down = update_plan.recreate_downtime(bp, timeline)
    extra = update_plan.fleet_overlap(bp, timeline)
    out: dict = {"recreate_downtime": asdict(down), "recreate": update_plan.describe(down),
                 "fleet_overlap": asdict(extra), "fleet": update_plan.describe_fleet(extra)}
    try:
        objects = render_stack(bp, "green", bp.staging.local_path)
        choice = update_plan.auto_on_own_fleet(bp, objects, gpn)
    except StrategyRefused as e:
        return {**out, "strategy": bp.promotion.strategy, "reason": str(e)}, [
            f"promotion.strategy {bp.promotion.strategy} cannot update this fleet: {e}"]
    except ConfigError as e:
        return {**out, "strategy": "unknown", "reason": f"the stack does not render: {e}"}, []
    return {**out, "strategy": choice.strategy, "reason": choice.reason}, []


def _role_dict(mem: capacity_math.RoleMemory, nodes: int, layout: str) -> dict:
    return {
        "role": mem.role, "nodes": nodes, "gpus": mem.gpus, "layout": layout,
        "weights_gb_per_gpu": round(mem.weights_gb_per_gpu, 2),
        "usable_gb_per_gpu": round(mem.usable_gb_per_gpu, 2),
        "runtime_reserve_gb_per_gpu": capacity_math.RUNTIME_RESERVE_GB,
        "kv_free_gb_per_gpu": round(mem.kv_free_gb_per_gpu, 2),
        "kv_bytes_per_token_per_gpu": round(mem.kv_bytes_per_token_per_gpu, 1),
        "kv_token_capacity": mem.kv_token_capacity_per_replica * mem.replicas,
        "fits": mem.fits,
    }


def _scenario_fit(bp: Blueprint, s, prefill: capacity_math.RoleMemory, decode: capacity_math.RoleMemory,
                  kv_tok: float) -> ScenarioFit:
    context = s.input_tokens + s.output_tokens
    gbps = bp.kv_transfer.usable_bandwidth_gbps
    seconds = capacity_math.kv_transfer_seconds(bp.model, bp.engine.kv_cache_dtype, s.input_tokens, gbps)
    if bp.kv_transfer.protocol == "tcp":
        seconds *= TCP_SLOWDOWN
    return ScenarioFit(s.name, context, round(kv_tok * s.input_tokens / 1e9, 3),
                       round(seconds * 1000, 2), prefill.max_sequences(context),
                       decode.max_sequences(context), max(s.concurrencies))


def _cost(bp: Blueprint, projected_hours: float) -> Cost:
    """The fleet's price, and a run's at the projected length (``tasks.planning.timeline``)."""
    n = bp.node_count
    cap = bp.aws.capacity
    p = price(bp.aws.instance_type, bp.aws.region, bp.aws.hourly_price_usd)
    hours = projected_hours
    per_hour = p.usd_per_hour * n if p else None
    if cap.mode == "odcr":
        note = "an ODCR bills at the On-Demand rate while active, used or not"
        held = cap.duration_hours or hours
        note += f"; held {held} h at most = ${per_hour * held:,.0f}" if per_hour else ""
    elif cap.mode == "capacity-block":
        note = ("a Capacity Block is paid upfront (quoted live by DescribeCapacityBlockOfferings, "
                f"at most ${cap.max_upfront_usd:,.0f}) and cannot be cancelled")
    else:
        note = f"existing reservation {cap.reservation_id}: billed to its owner as it is today"
    return Cost(bp.aws.instance_type, n, p.usd_per_hour if p else None,
                round(per_hour, 2) if per_hour else None, round(hours, 2),
                round(per_hour * hours, 2) if per_hour else None,
                p.source if p else "unknown: set aws.hourly_price_usd", p.as_of if p else "",
                cap.mode, cap.max_upfront_usd, note)


def _resources(bp: Blueprint) -> list[str]:
    n, it, zone = bp.node_count, bp.aws.instance_type, bp.aws.availability_zones[0]
    out = []
    if bp.aws.capacity.mode == "odcr":
        out += [f"cluster placement group pdlift-{bp.name}",
                f"targeted On-Demand Capacity Reservation: {n} x {it} in the first AZ with capacity "
                f"({', '.join(bp.aws.availability_zones)})"]
    elif bp.aws.capacity.mode == "capacity-block":
        out.append(f"Capacity Block: {n} x {it}, {bp.aws.capacity.duration_hours} h, "
                   f"upfront fee at most ${bp.aws.capacity.max_upfront_usd:,.0f}")
    else:
        out.append(f"uses existing reservation {bp.aws.capacity.reservation_id} in {zone}")
    known = instance_type(it)
    efa = known.efa_devices if known else "?"
    out += [f"launch template pdlift-{bp.name} (1 ENA + {efa} EFA-only interfaces, IMDSv2, nodeadm)",
            f"{n} x {it} instances joined to EKS cluster {bp.aws.eks.cluster}",
            f"namespace {bp.name}-blue or {bp.name}-green (the candidate colour)",
            f"prefill LeaderWorkerSet: {bp.topology.prefill.nodes} node(s); decode LeaderWorkerSet: "
            f"{bp.topology.decode.nodes} node(s); router Deployment + Service; production Service",
            f"weights staged to {bp.staging.local_path} on every node"]
    return out


def _warnings(bp: Blueprint, prefill: capacity_math.RoleMemory, decode: capacity_math.RoleMemory,
              scenarios: list[ScenarioFit], cost: Cost, gpn: int, gpu_gb: float) -> list[str]:
    w = []
    for role in (prefill, decode):
        if not role.fits:
            w.append(f"{role.role} does not fit: {role.weights_gb_per_gpu:.1f} GB of weights per GPU "
                     f"+ {capacity_math.RUNTIME_RESERVE_GB} GB runtime > {role.usable_gb_per_gpu:.1f} GB usable")
    for s in scenarios:
        if s.decode_max_sequences < s.max_target_concurrency:
            w.append(f"{s.scenario}: decode KV cache holds {s.decode_max_sequences} sequences of "
                     f"{s.context_tokens} tokens, fewer than the target concurrency {s.max_target_concurrency}")
        if s.prefill_max_sequences < 1:
            w.append(f"{s.scenario}: prefill cannot hold one {s.context_tokens}-token sequence")
    weights_gb = sum(capacity_math.weight_bytes(bp.model)) / 1e9
    one_node_gb = gpn * gpu_gb * bp.engine.gpu_memory_utilization * 0.7
    peak = max(max(s.concurrencies) for s in bp.benchmark.scenarios)
    if weights_gb < one_node_gb and peak <= PD_WORTH_IT_MAX_CONCURRENCY:
        w.append(f"PD disaggregation is probably not worth it: the model ({weights_gb:.0f} GB) fits on one "
                 f"node and the peak target concurrency is {peak}; plain {bp.engine.name} is simpler")
    if bp.kv_transfer.protocol == "tcp":
        w.append("KV transfer over TCP: expect ~100x slower KV transfer than EFA and a large TTFT regression")
    if bp.kv_transfer.connector == "mooncake" and bp.kv_transfer.protocol == "efa":
        # The generic wheels are built with USE_EFA=OFF and install the TCP transport without a
        # word (kvcache-ai/Mooncake#2070): the canary then fails the stack (docs/sources.md#kv-canary-evidence).
        w.append(f"Mooncake over EFA: the image {bp.engine.image} must carry the EFA build of the Mooncake "
                 "Transfer Engine (mooncake-transfer-engine-efa or -efa-cuda13); the generic wheels are built "
                 "without EFA, fall back to TCP, and the deploy canary fails them")
    if bp.engine.name == "sglang" and bp.kv_transfer.connector == "mooncake" and bp.kv_transfer.protocol == "efa":
        w.append("SGLang + Mooncake over EFA needs an SGLang build with PR #25083 (MOONCAKE_PROTOCOL=efa)")
    if bp.engine.name == "vllm" and bp.kv_transfer.connector == "nixl" and bp.kv_transfer.nixl_mode == "push":
        w.append("vLLM NixlPushConnector covers PP prefill -> non-PP decode and non-HMA models only (vllm#45880)")
    if bp.engine.all2all_backend == "uccl_ep" and bp.model.experts == 256 and bp.topology.decode.ep == 16:
        w.append("UCCL-EP with 256 experts + EP16 deadlocked in uccl#923 (reported fixed on main); "
                 "pin a UCCL-EP build validated on p5en")
    if cost.usd_per_hour and cost.usd_per_hour > bp.aws.capacity.max_hourly_usd:
        w.append(f"fleet costs ${cost.usd_per_hour:,.2f}/h, above aws.capacity.max_hourly_usd "
                 f"${bp.aws.capacity.max_hourly_usd:,.2f}: reserve will refuse")
    # The candidate colour comes up beside the live one: a later redeploy or rollout needs room
    # for a whole second stack, or the deploy stage refuses it (tasks/planning/room.py).
    extra = f" (+${cost.usd_per_hour:,.2f}/h while both colours run)" if cost.usd_per_hour else ""
    w.append(f"blue/green: a redeploy or rollout onto this fleet brings the candidate up beside the live "
             f"colour and needs {bp.node_count} more {bp.aws.instance_type} nodes{extra}; the first "
             f"migration does not")
    total_gpus = gpn * bp.node_count
    used = prefill.gpus + decode.gpus
    if used < total_gpus:
        w.append(f"{total_gpus - used} of {total_gpus} GPUs are left idle by the parallelism settings")
    return w
