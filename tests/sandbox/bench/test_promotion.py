"""Promotion and rollback against the Kubernetes stand-in, with both colours applied from the
rendered manifests (production routes to blue; green is the candidate)."""

from __future__ import annotations

import pytest

from tasks.adapters.engine_http import EngineHttp
from tasks.errors import StackNotReady, StageFailed
from tasks.planning.manifests.common import COLOUR_LABEL
from tasks.stages import deploy as deploy_stage
from tasks.stages import promote as stage
from tasks.errors import StackFailure
from tasks.stages.clock import Clock
from tests.fixtures.kube import wait_for
from tests.fixtures.steady_load import stream_in_background


def _production(stacks):
    bp = stacks.blueprint
    return stacks.kube.get("v1", "Service", bp.name, bp.name)


def _colour_objects(stacks, colour: str) -> dict[str, str | None]:
    """uid of each object of a colour (None when absent): 'untouched' means equal before and after."""
    bp, k = stacks.blueprint, stacks.kube
    objects = {"namespace": k.get("v1", "Namespace", f"{bp.name}-{colour}"),
               "router": k.get("apps/v1", "Deployment", f"router-{colour}", bp.name),
               "router-service": k.get("v1", "Service", f"router-{colour}", bp.name)}
    return {what: obj["metadata"]["uid"] if obj else None for what, obj in objects.items()}


def test_promotion_switches_the_production_service_and_traffic_flows_through_it(candidate_env):
    stacks, bp = candidate_env, candidate_env.blueprint
    with EngineHttp() as http:
        done = stage.promote(bp, "green", stacks.routing, http, timeout_s=30)
    assert done.previous == "blue" and done.colour == "green"
    assert _production(stacks)["spec"]["selector"][COLOUR_LABEL] == "green"
    # Every endpoint production now has is a green router, and each one served the check.
    endpoints = [e for e in stacks.routing.endpoints(bp.name, bp.name) if e.ready]
    assert {stacks.routing.pod_labels(bp.name, e.pod)[COLOUR_LABEL] for e in endpoints} == {"green"}
    assert sorted(done.answered) == sorted(e.url for e in endpoints) and len(endpoints) == 2


def test_rollback_deletes_the_candidate_and_leaves_production_untouched(candidate_env):
    stacks, bp = candidate_env, candidate_env.blueprint
    production_before, blue_before = _production(stacks)["metadata"]["resourceVersion"], _colour_objects(stacks, "blue")
    done = stage.rollback(bp, "green", stacks.routing)
    assert set(done.deleted) == {f"Deployment {bp.name}/router-green", f"Service {bp.name}/router-green",
                                 f"Namespace {bp.name}-green"}
    assert stacks.kube.get("apps/v1", "Deployment", "router-green", bp.name) is None
    assert _production(stacks)["metadata"]["resourceVersion"] == production_before
    assert _colour_objects(stacks, "blue") == blue_before and None not in blue_before.values()
    assert stage.rollback(bp, "green", stacks.routing).deleted == ()   # a second rollback is a no-op


def test_rollback_refuses_the_colour_production_routes_to(candidate_env):
    with pytest.raises(StageFailed, match="refusing to roll back blue"):
        stage.rollback(candidate_env.blueprint, "blue", candidate_env.routing)
    assert None not in _colour_objects(candidate_env, "blue").values()


def test_a_switch_whose_traffic_check_fails_is_switched_back(candidate_env):
    stacks, bp = candidate_env, candidate_env.blueprint
    stacks.kube.delete("apps/v1", "Deployment", "router-green", bp.name)   # green has no router left
    wait_for(lambda: not stacks.routing.endpoints(bp.name, "router-green"), what="the green routers to go")
    with EngineHttp() as http, pytest.raises(StackNotReady, match="undone, production routes to blue"):
        stage.promote(bp, "green", stacks.routing, http, Clock(), timeout_s=3)
    assert _production(stacks)["spec"]["selector"][COLOUR_LABEL] == "blue"


def _keeping(bp, seconds: int):
    return bp.model_copy(update={"promotion": bp.promotion.model_copy(update={"keep_previous_colour_s": seconds})})


def test_after_a_promotion_the_previous_colour_is_deleted_once_the_keep_window_ends(candidate_env):
    stacks, bp = candidate_env, _keeping(candidate_env.blueprint, 600)
    with EngineHttp() as http:
        done = stage.promote(bp, "green", stacks.routing, http, timeout_s=30)
    slept: list[float] = []

    def keep_window(seconds: float) -> None:
        slept.append(seconds)
        # While kept, blue is marked, and no deploy may bring a new candidate up in it.
        assert stage.KEPT_ANNOTATION in stacks.routing.annotations("v1", "Namespace", f"{bp.name}-blue")
        with pytest.raises(StackFailure, match="kept until") as refused:
            deploy_stage.check_not_kept(bp, stacks.kube, "blue")
        assert refused.value.reason == "KeptColour"

    retired = stage.retire_previous(bp, done.previous, done.colour, stacks.routing, Clock(sleep=keep_window))
    assert slept == [600] and retired.colour == "blue" and retired.kept_s == 600
    assert set(retired.deleted) == {f"Deployment {bp.name}/router-blue", f"Service {bp.name}/router-blue",
                                    f"Namespace {bp.name}-blue"}
    assert stacks.kube.get("apps/v1", "Deployment", "router-blue", bp.name) is None
    assert None not in _colour_objects(stacks, "green").values()          # the new live colour is untouched
    assert _production(stacks)["spec"]["selector"][COLOUR_LABEL] == "green"


def test_a_previous_colour_production_routes_to_again_is_kept(candidate_env):
    stacks, bp = candidate_env, candidate_env.blueprint
    blue_before = _colour_objects(stacks, "blue")
    # green was promoted, then someone switched production back to blue within the keep window
    retired = stage.retire_previous(bp, "blue", "green", stacks.routing, Clock(sleep=lambda s: None))
    assert retired.deleted == () and "routes to blue again" in retired.skipped
    assert _colour_objects(stacks, "blue") == blue_before
    assert stage.retire_previous(bp, None, "green", stacks.routing) is None   # a first promotion has none


def test_a_kept_colour_freed_and_deployed_again_meanwhile_is_left_alone(candidate_env):
    stacks, bp = candidate_env, _keeping(candidate_env.blueprint, 60)
    with EngineHttp() as http:
        done = stage.promote(bp, "green", stacks.routing, http, timeout_s=30)

    def someone_redeploys_blue(_seconds: float) -> None:
        # `pdlift rollback` then a new deploy: a fresh namespace without the mark
        stacks.routing.annotate("v1", "Namespace", f"{bp.name}-blue", None, {stage.KEPT_ANNOTATION: None})

    blue_before = _colour_objects(stacks, "blue")
    retired = stage.retire_previous(bp, done.previous, done.colour, stacks.routing, Clock(sleep=someone_redeploys_blue))
    assert retired.deleted == () and "deployed again meanwhile" in retired.skipped
    assert _colour_objects(stacks, "blue") == blue_before


@pytest.mark.parametrize("drained", [True, False], ids=["engines-asked", "engines-not-asked"])
def test_the_retired_colour_finishes_the_requests_it_took_before_the_switch_before_it_is_deleted(
        candidate_env, drained):
    """A client that resolved production just before the switch is on the old colour: the retire
    waits for its engines to report nothing running (the mutation, asking no engine, cuts it)."""
    import time

    stacks, bp = candidate_env, candidate_env.blueprint
    blue = [e.url for e in stacks.routing.endpoints(bp.name, "router-blue") if e.ready][0]
    request, outcome = stream_in_background(blue, bp.model.name, max_tokens=800)
    time.sleep(0.5)
    with EngineHttp() as http:
        done = stage.promote(bp, "green", stacks.routing, http, timeout_s=30)
        retired = stage.retire_previous(bp, done.previous, done.colour, stacks.routing,
                                        http=http if drained else None)
    request.join(timeout=60)
    assert f"Namespace {bp.name}-blue" in retired.deleted
    [result] = outcome
    if drained:
        assert not isinstance(result, Exception) and result.chunks >= 800, result
    else:
        assert isinstance(result, Exception) or result.chunks < 800, result
