"""Which strategy replaces the live colour, and why. Pure.

    blue-green  the candidate beside the live colour: needs room for a second colour
    rolling     by role, decode first, on the same nodes: the change must leave the KV
                fingerprint alone (``kv_fingerprint``); the P->D path is down while a role restarts
    recreate    drain, delete the live engines, the candidate on the same nodes: downtime
    fleet       a second fleet through the existing stages: zero downtime, extra fleet-hours

``auto`` takes the first of these that fits and the blueprint allows, in that order
(``../shared/reference/fleet-updates.md``: nobody rents a fleet twice the size for blue/green, and
mixing prefill and decode versions is only safe when the KV layout and handshake are unchanged).
An explicit strategy that cannot work is refused with what stands in its way; nothing is
touched before that.
"""

from __future__ import annotations

from dataclasses import dataclass

from blueprints.schema import CapacitySpec, PromotionSpec, Strategy
from tasks.errors import ConfigError

STRATEGIES: tuple[Strategy, ...] = ("auto", "blue-green", "rolling", "recreate", "fleet")
# What this version of pdlift can run; auto passes over the others, naming them.
AVAILABLE: tuple[Strategy, ...] = ("blue-green", "rolling", "recreate", "fleet")


class StrategyRefused(ConfigError):
    """The requested strategy cannot replace the live colour here; the message says why and what would."""


@dataclass(frozen=True)
class StrategyChoice:
    strategy: Strategy
    reason: str


def second_fleet_obstacle(capacity: CapacitySpec) -> str:
    """Why ``fleet`` cannot buy a second fleet with this capacity setting ('' when it can)."""
    if capacity.mode == "existing":
        return ("aws.capacity.mode is existing: the second fleet needs capacity of its own (mode odcr, "
                "which the swap cancels once the first fleet is released)")
    if capacity.mode == "capacity-block":
        return ("aws.capacity.mode is capacity-block: a Capacity Block is sold for whole days and cannot be "
                "cancelled, so the second fleet would bill for its whole block; use mode odcr for updates by fleet")
    return ""


def choose(requested: Strategy, promotion: PromotionSpec, *, live: str | None, room_shortfalls: list[str],
           kv_changes: list[str], available: tuple[Strategy, ...] = AVAILABLE,
           fleet_obstacle: str = "") -> StrategyChoice:
    """``requested`` (``auto`` defers to ``promotion.strategy``); ``room_shortfalls``: why the
    candidate does not fit beside the live colour (``room.shortfalls``, empty: it fits);
    ``kv_changes``: ``kv_fingerprint.differences`` between the live and the candidate stacks;
    ``available``: the strategies that can run (auto passes over the others);
    ``fleet_obstacle``: why a second fleet cannot be bought (``second_fleet_obstacle``)."""
    if requested not in STRATEGIES:
        raise ConfigError(f"unknown strategy {requested!r}; choose one of {', '.join(STRATEGIES)}")
    wanted = promotion.strategy if requested == "auto" else requested
    if live is None:
        return StrategyChoice("blue-green", "nothing is live yet: the first colour comes up on the empty fleet")
    if wanted == "auto":
        return _auto(promotion, live, room_shortfalls, kv_changes, available, fleet_obstacle)
    if wanted not in available:
        raise StrategyRefused(f"{wanted}: not available in this version of pdlift; nothing was touched. "
                              f"Available: {', '.join(available)}")
    if wanted == "blue-green" and room_shortfalls:
        raise StrategyRefused(f"blue-green: no room for a second colour beside the live {live}: "
                              + "; ".join(room_shortfalls) + ". Use --strategy recreate (downtime), rolling "
                              "(KV-compatible changes) or fleet (a second fleet)")
    if wanted == "rolling" and kv_changes:
        raise StrategyRefused("rolling: the change is not KV-compatible, so old and new engines of the two "
                              "roles could not exchange KV: " + "; ".join(kv_changes)
                              + ". Use --strategy recreate or fleet")
    if wanted == "fleet" and fleet_obstacle:
        raise StrategyRefused(f"fleet: {fleet_obstacle}; nothing was touched")
    return StrategyChoice(wanted, "asked for" if requested != "auto" else "promotion.strategy in the blueprint")


def _auto(promotion: PromotionSpec, live: str, room_shortfalls: list[str], kv_changes: list[str],
          available: tuple[Strategy, ...], fleet_obstacle: str) -> StrategyChoice:
    if not room_shortfalls:
        return StrategyChoice("blue-green", f"the fleet has room for the candidate beside the live {live}")
    full = f"no room beside the live {live} ({'; '.join(room_shortfalls)})"
    rolling_ok = not kv_changes and promotion.allow_role_downtime
    if rolling_ok and "rolling" in available:
        return StrategyChoice("rolling", f"{full}; the KV fingerprint is unchanged and "
                                         "promotion.allow_role_downtime is true")
    why_not_rolling = ("the KV fingerprint changes (" + "; ".join(kv_changes) + ")" if kv_changes
                       else "promotion.allow_role_downtime is false" if not promotion.allow_role_downtime
                       else "rolling is not available in this version")
    if promotion.allow_downtime:
        return StrategyChoice("recreate", f"{full}; not rolling: {why_not_rolling}; promotion.allow_downtime is true")
    reason = (f"{full}; not rolling: {why_not_rolling}; no downtime allowed (promotion.allow_downtime is false): "
              "a second fleet")
    if "fleet" not in available or fleet_obstacle:
        why = fleet_obstacle or "which this version of pdlift cannot run"
        raise StrategyRefused(f"auto: {reason}, but {why}; nothing was touched. Set promotion.allow_downtime: "
                              "true for recreate (downtime in a maintenance window), or add nodes for a second "
                              "colour (blue-green)")
    return StrategyChoice("fleet", reason)
