"""What an update of the live colour will cost in downtime, estimated before it runs. Pure.

``recreate``: production answers 503 from the switch to maintenance until the candidate has come
up on the same nodes, passed its canary and its benchmark, and production answers from it:

    drain      the longest request in flight finishing: the gate's TTFT SLO + output tokens x
               its TPOT SLO for the longest scenario, at most the engines' --shutdown-timeout
    bring-up   the engines' cold start and the canary: the run's last measured bring-up when
               there is one (``Deployed.bring_up_s``), else the timeline's deploy stage
    benchmark  the timeline's benchmark stage (its worst case adds an INCONCLUSIVE's approval wait
               with gate.undecided: ask)
    switch     production to the candidate and each endpoint answering (assumed 10 s; at most
               the promotion's 120 s traffic check)

``blue-green`` has no downtime but needs a second colour's nodes. A restore after a FAIL (or an
INCONCLUSIVE not approved) adds another cold start and canary; the worst case counts it.

``fleet``: no downtime, but two fleets bill at once from the second fleet's reservation until the
first is released: the second fleet's reserve, launch, fabric, weights and deploy stages; the live
colour's benchmark (the same-window baseline) and the candidate's; the switch; the keep window
(``promotion.keep_previous_colour_s``); the old colour's drain; the first fleet's release
(instances terminated, assumed 5 min). Those extra fleet-hours, at the fleet's price, are the cost.
"""

from __future__ import annotations

from dataclasses import dataclass

from blueprints.schema import Blueprint
from tasks.planning import room
from tasks.planning.manifests.common import SHUTDOWN_TIMEOUT_S
from tasks.planning.strategy import StrategyChoice, choose, second_fleet_obstacle
from tasks.planning.timeline import Timeline, approval_wait_s, duration, paired_benchmark

SWITCH_EXPECTED_S, SWITCH_WORST_S = 10.0, 120.0
RELEASE_S = 300.0  # terminating the first fleet's instances; assumed (EC2 gives no figure)
SECOND_FLEET_STAGES = ("reserve", "launch", "fabric", "weights", "deploy")


@dataclass(frozen=True)
class Downtime:
    expected_s: float
    worst_s: float
    phases_s: dict[str, float]  # expected seconds per phase
    basis: str


def drain_s(bp: Blueprint) -> float:
    slo = bp.gate.slo
    if not slo.ttft_ms or not slo.tpot_ms or not bp.benchmark.scenarios:
        return float(SHUTDOWN_TIMEOUT_S)
    longest = max(s.output_tokens for s in bp.benchmark.scenarios)
    return min(float(SHUTDOWN_TIMEOUT_S), (slo.ttft_ms + longest * slo.tpot_ms) / 1000.0)


def recreate_downtime(bp: Blueprint, timeline: Timeline, measured_bring_up_s: float | None = None) -> Downtime:
    stages = {s.stage: s for s in timeline.stages}
    deploy, bench = stages["deploy"], stages["benchmark"]
    bring_up = measured_bring_up_s if measured_bring_up_s is not None else deploy.expected_s
    phases = {"drain": round(drain_s(bp), 1), "bring_up": round(bring_up, 1),
              "benchmark": round(bench.expected_s, 1), "switch": SWITCH_EXPECTED_S}
    worst = SHUTDOWN_TIMEOUT_S + max(bring_up, deploy.worst_s) * 2 + bench.worst_s + SWITCH_WORST_S * 2
    source = (f"the last deploy's measured bring-up ({duration(bring_up)})" if measured_bring_up_s is not None
              else f"the deploy stage's projection ({duration(bring_up)})")
    return Downtime(round(sum(phases.values()), 1), round(worst, 1), phases,
                    f"drain + bring-up from {source} + the benchmark + the switch; at most, a restore "
                    "after a FAIL or an INCONCLUSIVE (a second cold start)"
                    + (" and an INCONCLUSIVE's approval wait (gate.undecided: ask)" if approval_wait_s(bp) else ""))


@dataclass(frozen=True)
class ExtraFleet:
    """Two fleets billing at once during a ``fleet`` update."""
    expected_h: float
    worst_h: float
    expected_usd: float | None
    worst_usd: float | None
    phases_s: dict[str, float]  # expected seconds per phase


def fleet_overlap(bp: Blueprint, timeline: Timeline) -> ExtraFleet:
    stages = {s.stage: s for s in timeline.stages}
    # Paired (gate.paired): the live colour is measured with the candidate, at once; otherwise
    # first, then the candidate.
    paired = bp.gate.paired is not None
    bench = paired_benchmark(bp) if paired else stages["benchmark"]
    phases = {name: round(stages[name].expected_s, 1) for name in SECOND_FLEET_STAGES}
    phases |= ({} if paired else {"baseline": round(bench.expected_s, 1)})
    phases |= {"benchmark": round(bench.expected_s, 1),
               "switch": SWITCH_EXPECTED_S, "keep": float(bp.promotion.keep_previous_colour_s),
               "drain": round(drain_s(bp), 1), "release": RELEASE_S}
    # the baseline's measurement has no approval wait; the candidate's may (gate.undecided: ask)
    baseline_worst = 0.0 if paired else bench.worst_s - approval_wait_s(bp)
    worst = (sum(stages[name].worst_s for name in SECOND_FLEET_STAGES) + baseline_worst + bench.worst_s
             + SWITCH_WORST_S + bp.promotion.keep_previous_colour_s + SHUTDOWN_TIMEOUT_S + RELEASE_S)
    expected_h, worst_h = sum(phases.values()) / 3600, worst / 3600
    price = timeline.usd_per_hour
    return ExtraFleet(round(expected_h, 2), round(worst_h, 2),
                      None if price is None else round(expected_h * price, 2),
                      None if price is None else round(worst_h * price, 2), phases)


def describe_fleet(x: ExtraFleet) -> str:
    cost = "" if x.expected_usd is None else f", about ${x.expected_usd:,.0f} (at most ${x.worst_usd:,.0f})"
    parts = ", ".join(f"{k} {duration(v)}" for k, v in x.phases_s.items())
    return (f"fleet: no downtime; a second fleet bills beside the first for about {x.expected_h:g} h "
            f"(at most {x.worst_h:g} h){cost}: {parts}")


def describe(d: Downtime) -> str:
    parts = ", ".join(f"{k} {duration(v)}" for k, v in d.phases_s.items())
    return f"recreate downtime: about {duration(d.expected_s)} ({parts}); at most {duration(d.worst_s)}"


def own_fleet_shortfalls(bp: Blueprint, objects: list[dict], gpus_per_node: int) -> list[str]:
    """``room.shortfalls`` of a candidate beside a live colour on the blueprint's own fleet (its
    topology's nodes, the live colour's pods placed on them as the scheduler would: fullest fit)."""
    wanted = room.needs(objects)
    counts = {"prefill": bp.topology.prefill.nodes, "decode": bp.topology.decode.nodes}
    nodes = [room.FleetNode(f"{r}-{i}", r, gpus_per_node) for r, n in counts.items() for i in range(n)]
    free = {n.name: n.gpus for n in nodes}
    pods = []
    for need in wanted:
        for k in range(need.pods):
            node = next((n for n in nodes if n.role == need.role and free[n.name] >= need.gpus_per_pod), None)
            if node is None:
                break
            free[node.name] -= need.gpus_per_pod
            pods.append(room.GpuPod("live", f"{need.role}-{k}", node.name, need.gpus_per_pod))
    return room.shortfalls(wanted, nodes, pods, "candidate")


def auto_on_own_fleet(bp: Blueprint, objects: list[dict], gpus_per_node: int) -> StrategyChoice:
    """What ``auto`` picks for a redeploy that keeps the KV fingerprint, on the blueprint's fleet."""
    return choose("auto", bp.promotion, live="blue", room_shortfalls=own_fleet_shortfalls(bp, objects, gpus_per_node),
                  kv_changes=[], fleet_obstacle=second_fleet_obstacle(bp.aws.capacity))
