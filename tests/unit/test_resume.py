"""Which stages a re-run of the same run id may skip: done in the ledger AND still there now."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tasks.planning.ledger import Ledger
from tasks.planning.records import (Deployed, FabricVerdict, Fleet, GateResult, GateVerdict, Node, Promotion,
                                    Reserved, StagedWeights)
from tasks.planning.resume import Observed, leading_done, still_done

IDS = ("i-0a", "i-0b", "i-0c", "i-0d")
FLEET = Fleet(tuple(Node(i, f"10.0.0.{n}", "decode") for n, i in enumerate(IDS)), "lt-1", 3, ())
DEPLOYED = Deployed("sandbox-2p2d", "green", "blue", "sandbox-2p2d-green", "sandbox-2p2d", "router-green", {}, 1.0, "")
DONE = Ledger("sandbox-2p2d", "run1", "2026-11-29T00:00:00Z",
              records={"reserve": Reserved("cr-1", "us-east-2a", "pg", False, (), False), "launch": FLEET,
                       "fabric": FabricVerdict(True, None, 1.0, 1, "", (), FLEET), "weights": StagedWeights(()),
                       "deploy": DEPLOYED})
ALL_THERE = Observed("active", frozenset(IDS), True, live_colour="blue")   # green is still the candidate


@pytest.mark.parametrize("stage", ["reserve", "launch", "fabric", "weights", "deploy"])
def test_a_stage_done_whose_results_are_all_there_is_skipped(stage):
    assert still_done(stage, DONE, ALL_THERE)


PROMOTED = replace(DONE, records={**DONE.records, "benchmark": GateResult(
    "promoted", "PASS", GateVerdict("PASS", (), "", "", ""), Promotion("green", "blue", ()))})


def test_a_benchmark_that_did_not_promote_the_live_colour_runs_again():
    assert not still_done("benchmark", DONE, ALL_THERE)                     # no verdict recorded
    assert not still_done("benchmark", PROMOTED, ALL_THERE)                 # production went back to blue


def test_a_finished_run_re_run_has_nothing_left_to_do():
    live_green = replace(ALL_THERE, live_colour="green")
    assert all(still_done(s, PROMOTED, live_green) for s in ("reserve", "launch", "fabric", "weights", "deploy",
                                                              "benchmark"))


def test_a_deployed_colour_that_is_live_without_this_run_promoting_it_is_not_a_candidate():
    # e.g. promoted by hand: deploying again is the only way to get a new candidate
    assert not still_done("deploy", DONE, replace(ALL_THERE, live_colour="green"))


@pytest.mark.parametrize("stage", ["reserve", "launch", "deploy"])
def test_a_stage_the_ledger_does_not_call_done_runs(stage):
    assert not still_done(stage, replace(DONE, records={}), ALL_THERE)


@pytest.mark.parametrize("state, skipped", [("active", True), ("pending", True), ("cancelled", False),
                                            ("expired", False), (None, False)])
def test_reserve_is_skipped_only_while_its_reservation_can_still_hold_the_fleet(state, skipped):
    assert still_done("reserve", DONE, replace(ALL_THERE, reservation_state=state)) is skipped


@pytest.mark.parametrize("stage", ["launch", "fabric", "weights", "deploy"])
def test_one_node_gone_means_every_stage_on_the_fleet_runs_again(stage):
    assert not still_done(stage, DONE, replace(ALL_THERE, running=frozenset(IDS[:3])))


def test_a_deploy_whose_candidate_was_rolled_back_runs_again():
    # A gate FAIL deleted the candidate; a re-run must not benchmark a colour that is gone.
    assert not still_done("deploy", DONE, replace(ALL_THERE, candidate_present=False))
    assert still_done("weights", DONE, replace(ALL_THERE, candidate_present=False))


def test_a_fabric_verdict_that_failed_is_not_done_though_it_is_recorded():
    failed = replace(DONE, records={**DONE.records, "fabric": replace(DONE.records["fabric"], passed=False)})
    assert not still_done("fabric", failed, ALL_THERE)
    assert still_done("launch", failed, ALL_THERE)


def test_a_ledger_without_the_outputs_it_needs_never_skips():
    bare = replace(DONE, records={"reserve": replace(DONE.records["reserve"], reservation_id=""),
                                  "launch": replace(FLEET, nodes=()), "deploy": replace(DEPLOYED, colour="")})
    assert not any(still_done(s, bare, ALL_THERE) for s in ("reserve", "launch", "deploy"))


def test_once_a_stage_runs_again_every_later_stage_runs_again_too():
    # New nodes after a lost reservation: fabric and weights were done on the old ones.
    done_before = {"reserve": False, "launch": True, "fabric": True, "weights": True}
    asked: list[str] = []

    def is_done(stage: str) -> bool:
        asked.append(stage)
        return done_before[stage]

    assert leading_done(list(done_before), [], is_done) == []
    assert asked == ["reserve"]   # nothing after the first stage that must run is asked


def test_a_leading_run_of_done_stages_is_skipped_up_to_a_rerun():
    stages = ["reserve", "launch", "fabric", "weights", "deploy", "benchmark"]
    assert leading_done(stages, [], lambda s: s != "weights") == ["reserve", "launch", "fabric"]
    assert leading_done(stages, ["weights", "deploy", "benchmark"], lambda s: True) == ["reserve", "launch",
                                                                                        "fabric"]
