"""Which strategy replaces the live colour: auto's order and every refusal of an explicit choice."""

from __future__ import annotations

import pytest

from blueprints.schema import CapacitySpec, PromotionSpec
from tasks.errors import ConfigError
from tasks.planning.strategy import STRATEGIES, StrategyRefused, choose, second_fleet_obstacle

FULL = ["decode: 2 pod(s) of 8 GPUs wanted, room for 0 on 2 decode node(s)"]
BLOCK = ["decode block_size: 64 -> 128", "prefill block_size: 64 -> 128"]


ALL = tuple(s for s in STRATEGIES if s != "auto")


def pick(requested="auto", *, live="blue", room=(), kv=(), available=ALL, **promotion):
    """The choice as it will be once every strategy runs (``available``: what auto may take)."""
    return choose(requested, PromotionSpec(**promotion), live=live, room_shortfalls=list(room),
                  kv_changes=list(kv), available=available)


@pytest.mark.parametrize("promotion, room, kv, expected", [
    ({}, [], [], "blue-green"),  # room beside the live colour: always blue-green first
    ({"allow_downtime": True, "allow_role_downtime": True}, [], BLOCK, "blue-green"),
    ({"allow_role_downtime": True}, FULL, [], "rolling"),
    ({"allow_role_downtime": True, "allow_downtime": True}, FULL, [], "rolling"),  # rolling before recreate
    ({"allow_role_downtime": True, "allow_downtime": True}, FULL, BLOCK, "recreate"),
    ({"allow_downtime": True}, FULL, [], "recreate"),  # a role's downtime not allowed
    ({"allow_role_downtime": True}, FULL, BLOCK, "fleet"),  # KV changes, no downtime allowed
    ({}, FULL, [], "fleet"),
])
def test_auto_takes_the_first_strategy_that_fits_and_the_blueprint_allows(promotion, room, kv, expected):
    assert pick(room=room, kv=kv, **promotion).strategy == expected


def test_auto_says_why_it_did_not_take_the_earlier_strategies():
    reason = pick(room=FULL, kv=BLOCK, allow_role_downtime=True).reason
    assert "no room beside the live blue" in reason and "room for 0" in reason
    assert "decode block_size: 64 -> 128" in reason and "promotion.allow_downtime is false" in reason
    assert "promotion.allow_role_downtime is false" in pick(room=FULL, allow_downtime=True).reason


def test_the_blueprints_strategy_stands_in_for_auto_and_an_explicit_one_overrides_it():
    assert pick(room=FULL, strategy="recreate").strategy == "recreate"
    assert pick("fleet", strategy="recreate").strategy == "fleet"
    assert pick("auto", strategy="auto", room=FULL, allow_downtime=True).strategy == "recreate"


def test_nothing_live_is_a_first_bring_up_whatever_was_asked():
    assert pick("recreate", live=None, room=FULL).strategy == "blue-green"


def test_blue_green_without_room_is_refused_naming_what_holds_the_gpus():
    with pytest.raises(StrategyRefused, match="room for 0") as e:
        pick("blue-green", room=FULL)
    assert "--strategy recreate" in str(e.value)


def test_rolling_is_refused_for_a_kv_change_naming_the_fields_and_accepted_without_one():
    with pytest.raises(StrategyRefused, match="decode block_size: 64 -> 128"):
        pick("rolling", room=FULL, kv=BLOCK)
    assert pick("rolling", room=FULL).strategy == "rolling"  # explicit: no allow_role_downtime needed


@pytest.mark.parametrize("strategy", ["recreate", "fleet"])
def test_recreate_and_fleet_need_neither_room_nor_an_unchanged_fingerprint(strategy):
    assert pick(strategy, room=FULL, kv=BLOCK).strategy == strategy


def test_an_unknown_strategy_is_bad_input():
    with pytest.raises(ConfigError, match="unknown strategy 'canary'"):
        pick("canary")


def test_the_default_available_set_runs_every_strategy_and_auto_passes_over_what_is_left_out():
    today = choose("auto", PromotionSpec(allow_role_downtime=True, allow_downtime=True), live="blue",
                   room_shortfalls=FULL, kv_changes=[])
    assert today.strategy == "rolling"
    without = choose("auto", PromotionSpec(allow_role_downtime=True, allow_downtime=True), live="blue",
                     room_shortfalls=FULL, kv_changes=[], available=("blue-green", "recreate"))
    assert without.strategy == "recreate" and "rolling is not available" in without.reason
    changed = choose("auto", PromotionSpec(allow_role_downtime=True, allow_downtime=True), live="blue",
                     room_shortfalls=FULL, kv_changes=BLOCK)
    assert changed.strategy == "recreate" and "decode block_size: 64 -> 128" in changed.reason
    no_downtime = choose("auto", PromotionSpec(), live="blue", room_shortfalls=FULL, kv_changes=[])
    assert no_downtime.strategy == "fleet" and "a second fleet" in no_downtime.reason
    with pytest.raises(StrategyRefused, match="fleet: not available"):
        choose("fleet", PromotionSpec(), live="blue", room_shortfalls=FULL, kv_changes=[],
               available=("blue-green", "rolling", "recreate"))
    with pytest.raises(StrategyRefused, match="allow_downtime: true for recreate"):
        choose("auto", PromotionSpec(), live="blue", room_shortfalls=FULL, kv_changes=[],
               available=("blue-green", "rolling", "recreate"))
    assert choose("auto", PromotionSpec(), live="blue", room_shortfalls=[], kv_changes=[]).strategy == "blue-green"


@pytest.mark.parametrize("mode, words", [("existing", "capacity of its own"),
                                         ("capacity-block", "cannot be cancelled")])
def test_fleet_is_refused_where_a_second_fleet_cannot_be_bought_and_released(mode, words):
    capacity = CapacitySpec(mode=mode, max_hourly_usd=260,
                            **({"reservation_id": "cr-0123456789abcdef0"} if mode == "existing" else {}))
    obstacle = second_fleet_obstacle(capacity)
    assert words in obstacle
    with pytest.raises(StrategyRefused, match=words):
        choose("fleet", PromotionSpec(), live="blue", room_shortfalls=FULL, kv_changes=[], fleet_obstacle=obstacle)
    # auto, where only a second fleet would do, names the obstacle and the ways out
    with pytest.raises(StrategyRefused, match=f"{words}.*allow_downtime: true for recreate"):
        choose("auto", PromotionSpec(), live="blue", room_shortfalls=FULL, kv_changes=[], fleet_obstacle=obstacle)
    # ... and an obstacle to a second fleet does not stand in the way of the other strategies
    assert choose("auto", PromotionSpec(allow_downtime=True), live="blue", room_shortfalls=FULL, kv_changes=[],
                  fleet_obstacle=obstacle).strategy == "recreate"
    assert second_fleet_obstacle(CapacitySpec(mode="odcr", max_hourly_usd=260)) == ""
