"""Cross-field rules a blueprint must obey, each naming the field it is about.

Pure: takes a validated ``Blueprint`` and returns problems as (field path, message, hint).
The loader turns them into located ``BlueprintProblem``s.
"""

from __future__ import annotations

import re

from typing import NamedTuple

from blueprints.schema import Blueprint
from blueprints.catalog import instance_type


# Capacity Block lengths EC2 sells: 1-day steps up to 14 days, then 7-day steps up to 182 days
# (botocore EC2 model, DescribeCapacityBlockOfferings.CapacityDurationHours; EC2 User Guide,
# "Capacity Blocks for ML"). Any other length fails at the API, after the run has started.
BLOCK_DAY_STEP_H, BLOCK_WEEK_STEP_H = 24, 7 * 24
BLOCK_DAY_STEPS_UP_TO_H, BLOCK_LONGEST_H = 14 * 24, 182 * 24


def capacity_block_hours_valid(hours: int) -> bool:
    if 0 < hours <= BLOCK_DAY_STEPS_UP_TO_H:
        return hours % BLOCK_DAY_STEP_H == 0
    return hours <= BLOCK_LONGEST_H and hours % BLOCK_WEEK_STEP_H == 0


def nearest_capacity_block_hours(hours: int) -> list[int]:
    """The valid lengths just below and above ``hours`` (one of them when it is out of range)."""
    valid = [h for h in range(BLOCK_DAY_STEP_H, BLOCK_LONGEST_H + 1, BLOCK_DAY_STEP_H)
             if capacity_block_hours_valid(h)]
    below = [h for h in valid if h < hours][-1:]
    above = [h for h in valid if h > hours][:1]
    return below + above


IMAGE_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


class RuleViolation(NamedTuple):
    path: tuple[str | int, ...]
    message: str
    hint: str = ""


def gpus_per_node(bp: Blueprint) -> int | None:
    if bp.topology.gpus_per_node:
        return bp.topology.gpus_per_node
    known = instance_type(bp.aws.instance_type)
    return known.gpus if known else None


def check(bp: Blueprint) -> list[RuleViolation]:
    """Every cross-field rule, in document order; empty when the blueprint is consistent."""
    out: list[RuleViolation] = []
    for rule in (_aws_rules, _parallelism_rules, _engine_rules, _benchmark_rules):
        out.extend(rule(bp))
    return out


def _aws_rules(bp: Blueprint) -> list[RuleViolation]:
    out = []
    cap = bp.aws.capacity
    if cap.mode == "existing" and not cap.reservation_id:
        out.append(RuleViolation(("aws", "capacity", "mode"),
                                 "mode 'existing' needs the reservation to use",
                                 "add aws.capacity.reservation_id: cr-..."))
    if cap.mode != "existing" and cap.reservation_id:
        out.append(RuleViolation(("aws", "capacity", "reservation_id"),
                                 f"reservation_id is only used with mode 'existing', not '{cap.mode}'",
                                 "remove it, or set mode: existing"))
    if cap.mode in ("odcr", "capacity-block") and not (cap.duration_hours or cap.end_time):
        out.append(RuleViolation(("aws", "capacity"),
                                 f"mode '{cap.mode}' needs how long to hold the capacity",
                                 "set duration_hours (or end_time)"))
    if cap.mode == "capacity-block" and cap.duration_hours and not capacity_block_hours_valid(cap.duration_hours):
        near = " or ".join(str(h) for h in nearest_capacity_block_hours(cap.duration_hours))
        out.append(RuleViolation(("aws", "capacity", "duration_hours"),
                                 f"a Capacity Block of {cap.duration_hours} h is not sold: EC2 sells 24-hour steps "
                                 "up to 336 h (14 days), then 168-hour steps up to 4368 h (182 days)",
                                 f"set duration_hours to {near}"))
    if cap.mode == "capacity-block" and cap.max_upfront_usd <= 0:
        out.append(RuleViolation(("aws", "capacity", "max_upfront_usd"),
                                 "a Capacity Block is paid upfront, and the limit is 0",
                                 "set max_upfront_usd to the most you will pay for the block"))
    for zone in bp.aws.availability_zones:
        if not zone.startswith(bp.aws.region):
            out.append(RuleViolation(("aws", "availability_zones"),
                                     f"zone {zone} is not in region {bp.aws.region}",
                                     f"use zones named {bp.aws.region}a, {bp.aws.region}b, ..."))
        if zone not in bp.aws.subnets:
            out.append(RuleViolation(("aws", "subnets"), f"no subnet for zone {zone}",
                                     f"add '{zone}: subnet-...' under aws.subnets"))
    known = instance_type(bp.aws.instance_type)
    if known is None and not (bp.topology.gpus_per_node and bp.topology.gpu_memory_gb
                              and bp.aws.hourly_price_usd):
        out.append(RuleViolation(("aws", "instance_type"),
                                 f"pdlift has no facts for {bp.aws.instance_type}",
                                 "use p5en.48xlarge, or set topology.gpus_per_node, "
                                 "topology.gpu_memory_gb and aws.hourly_price_usd"))
    return out


def _parallelism_rules(bp: Blueprint) -> list[RuleViolation]:
    out: list[RuleViolation] = []
    gpn = gpus_per_node(bp)
    if gpn is None:
        return out
    p, d = bp.topology.prefill, bp.topology.decode
    if p.tp > gpn:
        out.append(RuleViolation(("topology", "prefill", "tp"),
                                 f"tensor parallel {p.tp} spans nodes ({gpn} GPUs per node)",
                                 f"keep tp <= {gpn} and use pp across nodes"))
    if p.tp * p.pp > gpn * p.nodes:
        out.append(RuleViolation(("topology", "prefill"),
                                 f"tp x pp = {p.tp * p.pp} GPUs, but {p.nodes} node(s) have {gpn * p.nodes}",
                                 f"use {-(-p.tp * p.pp // gpn)} prefill nodes or lower tp/pp"))
    if d.tp > gpn:
        out.append(RuleViolation(("topology", "decode", "tp"),
                                 f"tensor parallel {d.tp} spans nodes ({gpn} GPUs per node)",
                                 f"keep tp <= {gpn}; scale across nodes with dp/ep"))
    if d.dp * d.tp > gpn * d.nodes:
        out.append(RuleViolation(("topology", "decode"),
                                 f"dp x tp = {d.dp * d.tp} GPUs, but {d.nodes} node(s) have {gpn * d.nodes}",
                                 f"use {-(-d.dp * d.tp // gpn)} decode nodes or lower dp/tp"))
    if d.ep > 1 and d.ep > d.dp * d.tp:
        out.append(RuleViolation(("topology", "decode", "ep"),
                                 f"ep {d.ep} exceeds the decode ranks (dp x tp = {d.dp * d.tp})",
                                 "set ep to dp x tp"))
    if d.ep > 1 and (bp.model.experts == 0 or bp.model.experts % d.ep):
        out.append(RuleViolation(("topology", "decode", "ep"),
                                 f"ep {d.ep} does not divide the model's {bp.model.experts} experts",
                                 "pick an ep that divides model.experts"))
    if bp.model.attention.kind == "gqa" and d.tp < p.tp:
        out.append(RuleViolation(("topology", "decode", "tp"),
                                 f"decode tp {d.tp} < prefill tp {p.tp}: non-MLA KV layouts cannot be "
                                 "re-sharded that way (llm-d: P TP > D TP asserts)",
                                 f"set decode tp >= {p.tp}"))
    return out


def _engine_rules(bp: Blueprint) -> list[RuleViolation]:
    out = []
    e, kv, p, d = bp.engine, bp.kv_transfer, bp.topology.prefill, bp.topology.decode
    if e.name == "vllm" and kv.connector == "nixl" and kv.nixl_mode == "pull" and p.pp > 1:
        out.append(RuleViolation(("kv_transfer", "nixl_mode"),
                                 "vLLM's pull NixlConnector rejects prefill pp > 1 (vllm#52913)",
                                 "use nixl_mode: push (NixlPushConnector) or connector: mooncake"))
    if not IMAGE_DIGEST.search(e.image):
        # Checked again when the stack is rendered; here it refuses a rollout's override (or a
        # fleet strategy's second fleet) before anything is bought for an image no node may run.
        out.append(RuleViolation(("engine", "image"), f"{e.image!r} is not pinned by digest: tags move, and a "
                                 "GPU fleet must run exactly the image that was validated",
                                 "use REGISTRY/REPO@sha256:<64 hex> (e.g. from `crane digest IMAGE:TAG`)"))
    known = instance_type(bp.aws.instance_type)
    uses_efa = known is not None and known.efa_devices > 0
    if uses_efa and d.ep > 1 and e.all2all_backend.startswith("deepep"):
        out.append(RuleViolation(("engine", "all2all_backend"),
                                 f"{e.all2all_backend} needs InfiniBand GPUDirect Async (IBGDA), which "
                                 "EFA lacks; decode EP would hang or fall back",
                                 "use all2all_backend: uccl_ep (UCCL-EP, a DeepEP drop-in for EFA)"))
    ports = {"prefill_port": e.prefill_port, "decode_port": e.decode_port,
             "router_port": e.router_port, "bootstrap_port": e.bootstrap_port}
    seen: dict[int, str] = {}
    for name, port in ports.items():
        if port in seen:
            out.append(RuleViolation(("engine", name), f"port {port} is also {seen[port]}",
                                     "give prefill, decode, router and bootstrap distinct ports"))
        seen.setdefault(port, name)
    return out


def _benchmark_rules(bp: Blueprint) -> list[RuleViolation]:
    out = []
    names = {s.name for s in bp.benchmark.scenarios}
    for i, s in enumerate(bp.benchmark.scenarios):
        if s.input_tokens + s.output_tokens > bp.model.max_context:
            out.append(RuleViolation(("benchmark", "scenarios", i, "input_tokens"),
                                     f"{s.input_tokens} + {s.output_tokens} tokens exceed the model's "
                                     f"context of {bp.model.max_context}",
                                     "shorten the scenario or raise model.max_context"))
    for name in bp.baseline.scenarios:
        if name not in names:
            out.append(RuleViolation(("baseline", "scenarios", name),
                                     f"baseline for unknown scenario '{name}'",
                                     f"name one of: {', '.join(sorted(names))}"))
    for i, r in enumerate(bp.gate.rules):
        if not r.report_only and r.max_ratio is None and r.min_ratio is None:
            out.append(RuleViolation(("gate", "rules", i),
                                     f"rule for {r.metric} has no bound",
                                     "set max_ratio (latency) or min_ratio (throughput), or report_only: true"))
    return out + _probe_rules(bp) + _paired_rules(bp)


def _probe_points(bp: Blueprint) -> set[str]:
    return {f"{s.name}@{c}" for s in bp.benchmark.scenarios if s.ttft_probe for c in s.concurrencies}


def _uncounted_transfers(bp: Blueprint) -> tuple[str, str] | None:
    """(why, fix) when nothing pdlift reads could count this stack's KV transfers; None when it can."""
    if not bp.benchmark.server_metrics.enabled:
        return ("needs the engines' transfer metrics to show its KV reached decode, and "
                "benchmark.server_metrics is off", "set benchmark.server_metrics.enabled: true")
    if bp.engine.name != "vllm":
        return None
    if bp.kv_transfer.connector == "mooncake":
        # The nodes' EFA counters cannot stand in: under load they also count the prefill
        # nodes' pipeline-parallel and the decode nodes' expert-parallel traffic.
        return ("vLLM's MooncakeConnector exports no transfer metrics, so nothing could show its KV reached "
                "decode (the nodes' EFA counters also count pipeline- and expert-parallel traffic)",
                "use kv_transfer.connector: nixl (vllm:nixl_* metrics) or SGLang")
    if bp.kv_transfer.nixl_mode == "push":
        # vLLM's NixlPromMetrics observe a transfer where the KV is read (nixl/stats.py: the
        # pulling decode); where NixlPushConnector observes its writes is not documented, so a
        # count read on decode could be zero for every probe, or miss the prefill's.
        return ("with kv_transfer.nixl_mode push, where vLLM counts its KV transfers is not documented, so "
                "nothing pdlift reads could show the probe's KV reached decode",
                "use kv_transfer.nixl_mode: pull (vllm:nixl_xfer_time_seconds on decode) or SGLang")
    return None


def _probe_rules(bp: Blueprint) -> list[RuleViolation]:
    """A TTFT probe is judged only where the benchmark can see its KV transfers (the engines'
    transfer metrics: server_metrics on, a connector that exports them). Refused here, before any
    fleet is bought, rather than left "not judged" after its load: a probe that can never be judged
    only adds load and an INCONCLUSIVE gate."""
    uncounted = _uncounted_transfers(bp)
    if uncounted is None:
        return []
    why, fix = uncounted
    return [RuleViolation(("benchmark", "scenarios", i, "ttft_probe"), f"TTFT probe {s.name}: {why}",
                          f"{fix}, or remove ttft_probe")
            for i, s in enumerate(bp.benchmark.scenarios) if s.ttft_probe]


def _paired_rules(bp: Blueprint) -> list[RuleViolation]:
    """gate.paired: weights that name the benchmark's points, all of them or none, for the contracts'
    families; one request stream (a Poisson rate each colour derived from its own warm-up would
    load the faster colour more); and load that fits the budget (no round is cut short)."""
    paired, out = bp.gate.paired, []
    if paired is None:
        return out
    every = {f"{s.name}@{c}" for s in bp.benchmark.scenarios for c in s.concurrencies}
    probes = _probe_points(bp)
    for family, named in paired.weights.items():
        where = ("gate", "paired", "weights", family)
        # A TTFT probe's few tokens give no TPOT to speak of: it weighs in the TTFT contract only.
        points = every if family == "ttft" else every - probes
        if family not in paired.contracts:
            out.append(RuleViolation(where, f"weights for {family}, which has no contract",
                                     f"add {family} to gate.paired.contracts or remove its weights"))
        out.extend(RuleViolation(where + (key,), f"{key} is a TTFT probe: its {family} is not gated",
                                 f"remove {key} from gate.paired.weights.{family}")
                   for key in named if key in probes and key not in points)
        out.extend(RuleViolation(where + (key,), f"no benchmark point {key!r} to weigh",
                                 f"a point is scenario@concurrency, one of: {', '.join(sorted(points))}")
                   for key in named if key not in every)
        missing = sorted(points - set(named))
        if named and missing:
            out.append(RuleViolation(where, f"weights name some points but not {', '.join(missing)}",
                                     "weigh every point or none (unnamed points would weigh 1 against the others' "
                                     "shares); `pdlift plan --suggest-gate` prints a full set"))
    for family in paired.contracts:
        if family != "ttft" and every and every <= probes:
            out.append(RuleViolation(("gate", "paired", "contracts", family), f"every point is a TTFT probe, so the "
                                     f"{family} contract has no point to judge",
                                     f"remove {family} from gate.paired.contracts, or add a scenario without "
                                     "ttft_probe"))
    if bp.benchmark.mode == "poisson":
        out.append(RuleViolation(("benchmark", "mode"), "a paired gate needs one request stream for both colours",
                                 "use mode: concurrency with gate.paired"))
    load_min = sum(s.duration_s * len(s.concurrencies) for s in bp.benchmark.scenarios) / 60.0
    budget = bp.benchmark.budget_minutes
    if budget is not None and load_min > budget + 1e-9:
        out.append(RuleViolation(("benchmark", "budget_minutes"),
                                 f"the paired gate's points add up to {load_min:.1f} min of load, more than "
                                 f"budget_minutes {budget:g}", "shorten duration_s or raise budget_minutes"))
    return out
