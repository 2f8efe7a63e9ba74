"""How long each stage of a migration will take on real AWS, and what it costs. Pure.

``project(bp, weights_gb, usd_per_hour) -> Timeline``: per stage an expected and a worst case,
each with how it was computed and where its figures come from (docs/sources.md#plan-timeline):
the reference notes, or the blueprint itself. A figure nobody has published for p5en is said to
be an assumption, so a measured run can replace it (the migrate summary shows both).
Every stage bills the whole fleet at its hourly price: a reservation bills from the moment it is
active, used or not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from blueprints.schema import Blueprint
from tasks.planning.fabric.commands import INVENTORY_TIMEOUT_S, MAX_SWEEP_BYTES, NCCL_GRACE_S
from tasks.planning.gate_sequential import MIN_ROUNDS

# reserve: the Create call answers at once; a new reservation may read "pending" for ~5 min while
# already usable (AWS user guide, capacity-reservations-view).
RESERVE_EXPECTED_S = 60.0
RESERVE_PENDING_S = 300.0
# launch to joined: no published figure for p5en. CPU types register ~70-80 s after launch
# (karpenter-provider-aws#6128); GPU types boot much longer (amazon-eks-ami#1099). Assumed.
BOOT_JOIN_EXPECTED_S = 600.0
# fabric: nccl-tests' defaults are 5 warm-up and 20 timed iterations, run out of place and in
# place, plus the data check (-c 1): ~47 passes of each size. Start-up of one test (mpirun over
# SSH, NCCL init over EFA): assumed 30 s. fi_pingpong and the inventory: assumed 20 s per layer.
NCCL_PASSES_PER_SIZE = 47
NCCL_STARTUP_S = 30.0
QUICK_LAYER_S = 20.0
# weights: s5cmd saturates about 4.3 GB/s on one node (its README: a 40 Gbps link; s5cmd#636);
# 750 GB takes 12.5 min at 1 GB/s, the slow case (an unstriped NVMe, S3 throttling).
S3_EXPECTED_GBPS = 4.3
S3_SLOW_GBPS = 1.0
# engine start: GLM-class loads take 10-45 min; the LWS startup probe allows 45 (failureThreshold
# 2700 at 1 s), the reference deployment's bound.
ENGINE_START_EXPECTED_S = 600.0
ENGINE_START_WORST_S = 2700.0
# A Capacity Block ends at 11:30 UTC and EC2 starts shutting its instances down 30 min before.
BLOCK_SHUTDOWN_S = 1800.0


@dataclass(frozen=True)
class StageTime:
    stage: str
    expected_s: float
    worst_s: float
    basis: str                 # how the figures were computed
    source: str                # where they come from

    def usd(self, usd_per_hour: float | None) -> tuple[float | None, float | None]:
        if usd_per_hour is None:
            return None, None
        return self.expected_s / 3600 * usd_per_hour, self.worst_s / 3600 * usd_per_hour


@dataclass(frozen=True)
class Timeline:
    stages: tuple[StageTime, ...]
    usd_per_hour: float | None
    expected_s: float
    worst_s: float
    warnings: tuple[str, ...] = ()

    def of(self, stage: str) -> StageTime | None:
        return next((s for s in self.stages if s.stage == stage), None)


def duration(seconds: float) -> str:
    """A span for people: 45 s, 12 min, 3.4 h."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def beside_actual(timeline: Timeline, summary: list[dict]) -> list[str]:
    """The migrate summary's table: each stage as it went here, beside its projection on AWS."""
    lines = ["| stage | status | seconds | projected on AWS: expected | at most |", "|---|---|---|---|---|"]
    for row in summary:
        projected = timeline.of(row["stage"])
        expected, worst = (duration(projected.expected_s), duration(projected.worst_s)) if projected else ("—", "—")
        lines.append(f"| {row['stage']} | {row['status']} | {row['seconds']} | {expected} | {worst} |")
    return lines


def _reserve(bp: Blueprint) -> StageTime:
    cap = bp.aws.capacity
    if cap.mode == "existing":
        return StageTime("reserve", 10.0, 10.0, "describe the existing reservation", "one API call")
    worst = min(cap.wait_ready_s, RESERVE_EXPECTED_S + RESERVE_PENDING_S) if cap.mode == "odcr" else RESERVE_EXPECTED_S
    basis = ("create the placement group and the reservation, wait until usable "
             f"(at most aws.capacity.wait_ready_s = {cap.wait_ready_s} s)") if cap.mode == "odcr" else \
        ("buy the offering DescribeCapacityBlockOfferings quotes; not counted: the wait until the block "
         "starts (11:30 UTC on its first day), which the offering says and which is not billed hourly")
    return StageTime("reserve", RESERVE_EXPECTED_S, max(worst, RESERVE_EXPECTED_S), basis,
                     "AWS user guide: a new reservation may read pending ~5 min while usable")


def _launch(bp: Blueprint) -> StageTime:
    join = bp.aws.eks.join_timeout_s
    return StageTime("launch", BOOT_JOIN_EXPECTED_S, max(BOOT_JOIN_EXPECTED_S, float(join)),
                     f"{bp.node_count} x {bp.aws.instance_type} in parallel: boot, nodeadm, join; at most "
                     f"aws.eks.join_timeout_s = {join} s",
                     "assumed: no published p5en figure (CPU types join in ~80 s, karpenter-provider-aws#6128; "
                     "GPU types boot much longer, amazon-eks-ami#1099)")


def _sweep_s(busbw_gbs: float, factor: float, judge_bytes: int) -> float:
    """One nccl-tests run's transfers: every doubling size from the judging size to the sweep's
    end, ~47 passes each, at the bus bandwidth floor (algbw = busbw / factor)."""
    sizes, size = 0, judge_bytes
    while size <= max(judge_bytes, MAX_SWEEP_BYTES):
        sizes += size
        size *= 2
    return NCCL_PASSES_PER_SIZE * sizes / (busbw_gbs / factor * 1e9)


def _fabric(bp: Blueprint) -> StageTime:
    f, n = bp.fabric, bp.node_count
    g = f.gpus
    judge = f.judge_size_bytes
    single = NCCL_STARTUP_S + _sweep_s(f.single_node_allreduce_busbw_gbs, 2 * (g - 1) / g, judge)
    ranks = 2 * g
    pair = (QUICK_LAYER_S + 3 * NCCL_STARTUP_S
            + _sweep_s(f.pair_allreduce_busbw_gbs, 2 * (ranks - 1) / ranks, judge)
            + _sweep_s(f.pair_alltoall_busbw_gbs, (ranks - 1) / ranks, judge)
            + _sweep_s(f.pair_sendrecv_busbw_gbs, 1.0, judge))
    rounds = n - 1 if n % 2 == 0 else n
    whole = n * g
    full = (2 * NCCL_STARTUP_S + _sweep_s(f.pair_allreduce_busbw_gbs, 2 * (whole - 1) / whole, judge)
            + _sweep_s(f.pair_alltoall_busbw_gbs, (whole - 1) / whole, judge)) if n > 2 else 0.0
    expected = 2 * QUICK_LAYER_S + single + rounds * pair + full
    # Worst: every test runs to its watchdog, and each replacement attempt boots a node and tests again.
    # Per node, aws.ssh.max_parallel nodes at a time: the inventory's three commands, then the
    # loopbacks (the negative control, then the NICs fabric.loopbacks_per_node at a time), each to
    # its bound (a loopback's: the server's listen wait, the client's watchdog and the grace).
    batches = math.ceil(n / bp.aws.ssh.max_parallel)
    per_node = (3 * INVENTORY_TIMEOUT_S + (1 + math.ceil(f.efa_devices / f.loopbacks_per_node))
                * (2 * f.test_timeout_s + NCCL_GRACE_S))
    tests = batches + 4 * rounds + (2 if n > 2 else 0)
    worst = batches * per_node + tests * f.test_timeout_s + f.replace_attempts * (
        bp.aws.eks.join_timeout_s + per_node + (1 + 4 * (n - 1)) * f.test_timeout_s)
    return StageTime("fabric", expected, worst,
                     f"inventory and {f.efa_devices} NIC loopbacks, single-node all_reduce, {rounds} pairwise "
                     f"round(s) of fi_pingpong + all_reduce/alltoall/sendrecv swept {judge >> 30} GiB..16 GiB at "
                     f"the fabric floors, the whole set; at most every command to its bound (a loopback 2 x "
                     f"fabric.test_timeout_s + {NCCL_GRACE_S} s, {f.loopbacks_per_node} per node at a time; "
                     f"a test fabric.test_timeout_s) and "
                     f"{f.replace_attempts} replacement(s)",
                     f"nccl-tests defaults (20 iterations, 5 warm-up); start-up {NCCL_STARTUP_S:.0f} s per test "
                     "assumed; the reference estimate for 4-8 p5en is 15-30 min (3-7 rounds)")


def _weights(bp: Blueprint, weights_gb: float) -> StageTime:
    return StageTime("weights", weights_gb / S3_EXPECTED_GBPS, weights_gb / S3_SLOW_GBPS,
                     f"{weights_gb:,.0f} GB to every node in parallel at {S3_EXPECTED_GBPS:g} GB/s per node "
                     f"({S3_SLOW_GBPS:g} GB/s slow)",
                     "s5cmd's published ceiling ~4.3 GB/s per node (a 40 Gbps link, s5cmd#636)")


def _deploy(bp: Blueprint) -> StageTime:
    return StageTime("deploy", ENGINE_START_EXPECTED_S, ENGINE_START_WORST_S,
                     "weights from NVMe into GPU memory, CUDA graphs and warm-up, then the canary",
                     "GLM-class loads take 10-45 min; the startup probe allows 45 (reference deployment notes)")


def approval_wait_s(bp: Blueprint) -> float:
    """How long an INCONCLUSIVE gate may hold the candidate: ``promotion.approval_timeout_s`` with
    ``gate.undecided: ask``; none with ``rollback`` (it rolls back at once, as a FAIL does)."""
    return float(bp.promotion.approval_timeout_s) if bp.gate.undecided == "ask" else 0.0


def _undecided(bp: Blueprint) -> str:
    if bp.gate.undecided == "ask":
        return (f"at most, plus an INCONCLUSIVE's wait for approval ({bp.promotion.approval_timeout_s} s, "
                "gate.undecided: ask)")
    return "an INCONCLUSIVE rolls back at once (gate.undecided: rollback), no approval wait"


def paired_benchmark(bp: Blueprint) -> StageTime:
    """The paired benchmark (``gate.paired``): both colours at once, each point's duration_s in
    all, judged after each of its looks; planned to the last look."""
    bench, looks = bp.benchmark, bp.gate.paired.looks
    points = [(s, c) for s in bench.scenarios for c in s.concurrencies]
    budget = bench.budget_minutes * 60.0 if bench.budget_minutes is not None else math.inf
    load = min(sum(s.duration_s for s, _ in points), budget)
    return StageTime("benchmark", load, load + approval_wait_s(bp),
                     f"paired: {len(points)} points, both colours at once under one request stream, in {looks} "
                     f"looks of duration_s / {looks}, planned to the last (as early as {duration(load / looks)} "
                     f"if decided at the first); {_undecided(bp)}",
                     "the blueprint; scripts/bench/gate_sim.py measures when the paired gate decides")


def _benchmark(bp: Blueprint) -> StageTime:
    bench = bp.benchmark
    points = [(s, c) for s in bench.scenarios for c in s.concurrencies]
    budget = bench.budget_minutes * 60.0 if bench.budget_minutes is not None else math.inf
    approval = approval_wait_s(bp)
    if bp.gate.paired is not None and bp.baseline.endpoint is not None:
        return paired_benchmark(bp)   # the migration, beside the service it replaces
    if bench.sequential is None:
        load = sum(s.duration_s for s, _ in points) * bench.repeats
        return StageTime("benchmark", min(load, budget), min(load, budget) + approval,
                         f"{len(points)} points x {bench.repeats} repeats at full length"
                         + (f", within benchmark.budget_minutes = {bench.budget_minutes:g}" if budget < math.inf else "")
                         + f"; {_undecided(bp)}",
                         "the blueprint")
    k = bench.sequential.rounds
    load = min(sum(s.duration_s for s, _ in points), budget)
    earliest = min(sum(s.duration_s * MIN_ROUNDS / k for s, _ in points), budget)
    # Planned as if no point stopped early: how early they stop depends on the candidate and the
    # noise (scripts/bench/gate_sim.py --sequential measures it); a clear FAIL ends it much sooner.
    return StageTime("benchmark", load, load + approval,
                     f"sequential: {len(points)} points in rounds of duration_s / {k}, planned to their caps"
                     + (f" within benchmark.budget_minutes = {bench.budget_minutes:g}" if budget < math.inf else "")
                     + f" (as early as {duration(earliest)} if every point is decided at its round {MIN_ROUNDS}); "
                       f"{_undecided(bp)}",
                     "the blueprint; scripts/bench/gate_sim.py --sequential measures when points decide")


def project(bp: Blueprint, weights_gb: float, usd_per_hour: float | None) -> Timeline:
    """The timeline of a whole migration of ``bp``'s fleet, and the warnings it raises."""
    stages = (_reserve(bp), _launch(bp), _fabric(bp), _weights(bp, weights_gb), _deploy(bp), _benchmark(bp))
    expected, worst = sum(s.expected_s for s in stages), sum(s.worst_s for s in stages)
    return Timeline(stages, usd_per_hour, expected, worst, tuple(_warnings(bp, expected, worst)))


def _warnings(bp: Blueprint, expected_s: float, worst_s: float) -> list[str]:
    out = []
    cap = bp.aws.capacity
    if cap.mode == "capacity-block" and cap.duration_hours:
        if worst_s > cap.duration_hours * 3600 - BLOCK_SHUTDOWN_S:
            out.append(f"the run may take {worst_s / 3600:.1f} h at most, longer than the Capacity Block's "
                       f"{cap.duration_hours} h less the 30 min EC2 takes to shut it down")
    elif cap.mode == "odcr" and cap.duration_hours and worst_s > cap.duration_hours * 3600:
        out.append(f"the run may take {worst_s / 3600:.1f} h at most, longer than the reservation's "
                   f"aws.capacity.duration_hours = {cap.duration_hours}")
    if expected_s > bp.expected_run_hours * 3600:
        out.append(f"the run is projected at {expected_s / 3600:.1f} h, more than the blueprint's "
                   f"expected_run_hours = {bp.expected_run_hours:g}")
    return out
