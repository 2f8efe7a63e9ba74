"""Stage 6b: promote the candidate colour, or roll it back. Adapters and the clock are injected.

Promote (after a PASS or an approval): apply the production Service rendered for the candidate
colour (server-side apply; its selector names the colour's router pods), wait until every ready
endpoint of the production Service is a router of that colour, send a small completion through
each, then record the candidate's measurements as the new baseline. A switch whose traffic
check fails is switched back to the previous colour before the error is raised: production is
never left pointing at routers that do not answer.

Retire (after a promotion completes): the previous colour stays up for
``promotion.keep_previous_colour_s`` (an instant switch-back while the new colour proves itself;
0 retires it at once), then, once its engines report nothing running or waiting (requests that
reached it before the switch finish; at most the engines' --shutdown-timeout), it is deleted like
a rollback, so its GPUs are free for the next candidate. A previous colour that production routes
to again by then is kept.

Roll back (after a FAIL, a rejection or an approval timeout): delete the candidate's engine
namespace ``<bp.name>-<colour>`` and its router (Deployment and Service ``router-<colour>`` in
the stable namespace). The production Service and the live colour are not touched; rolling
back the colour production routes to is refused. Deleting what is already gone is a no-op, so
a rollback can be repeated.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from blueprints.schema import Blueprint
from tasks.adapters.ledger_store import write_atomic
from tasks.adapters.service_routing import Endpoint
from tasks.errors import NotReadyYet, PdliftError, StackNotReady
from tasks.planning.bench_baseline import baseline_from_summaries, dumps_baseline
from tasks.planning.manifests import render_production_service
from tasks.planning.manifests.common import COLOUR_LABEL, KEPT_ANNOTATION, colour_namespace, stable_namespace
from tasks.planning.metrics import ScenarioSummary
from tasks.planning.records import Promotion, Retired, RolledBack
from tasks.stages import deploy as deploy_stage
from tasks.stages.benchmark import baseline_path
from tasks.stages.clock import Clock, poll_until
from tasks.stages.drain import wait_in_flight
from tasks.stages.ports import Engines, Routing

PROBE_PROMPT = "pdlift promotion check: say something"
PROBE_TOKENS = 4


def _colour_endpoints(bp: Blueprint, routing: Routing) -> tuple[list[Endpoint], set]:
    ns = stable_namespace(bp)
    ready = [e for e in routing.endpoints(ns, bp.name) if e.ready]
    colours = {routing.pod_labels(ns, e.pod).get(COLOUR_LABEL) for e in ready}
    return ready, colours


def check_traffic(bp: Blueprint, colour: str, routing: Routing, http: Engines,
                  clock: Clock = Clock(), timeout_s: float = 120.0, poll_s: float = 0.5) -> tuple[str, ...]:
    """Wait until the production Service routes only to ``colour``'s routers, then prove each answers."""
    ns = stable_namespace(bp)
    seen: list[set] = [set()]

    def switched() -> list[Endpoint] | None:
        ready, seen[0] = _colour_endpoints(bp, routing)
        return ready if ready and seen[0] == {colour} else None

    try:
        ready = poll_until(switched, bound_s=timeout_s, clock=clock, interval_s=poll_s)
    except NotReadyYet:
        shown = ", ".join(sorted(str(c) for c in seen[0])) or "no ready endpoint"
        raise StackNotReady(f"the production Service {ns}/{bp.name} still routes to {shown} "
                            f"{timeout_s:g} s after switching it to {colour}; check the router pods "
                            f"router-{colour} in {ns} (kubectl -n {ns} get endpoints {bp.name})") from None
    for e in ready:
        http.stream_completion(e.url + "/v1/completions", bp.model.name, PROBE_PROMPT, PROBE_TOKENS, 60.0)
    return tuple(e.url for e in ready)


def promote(bp: Blueprint, colour: str, routing: Routing, http: Engines, clock: Clock = Clock(),
            timeout_s: float = 120.0) -> Promotion:
    previous = deploy_stage.live_colour(bp, routing.kube)
    routing.apply(render_production_service(bp, colour))
    try:
        answered = check_traffic(bp, colour, routing, http, clock, timeout_s)
    except PdliftError as e:
        if previous and previous != colour:
            routing.apply(render_production_service(bp, previous))
            raise StackNotReady(f"promotion of {colour} undone, production routes to {previous} again: {e}") from e
        raise
    return Promotion(colour, previous, answered, answered_at=clock.now().timestamp())


def rollback(bp: Blueprint, colour: str, routing: Routing) -> RolledBack:
    """The deploy stage's rollback (``tasks.stages.deploy.rollback``), without waiting for the
    namespace to go: the next deploy waits for a terminating namespace itself."""
    return deploy_stage.rollback(bp, routing.kube, colour, wait_s=0)


def retire_previous(bp: Blueprint, previous: str | None, promoted: str, routing: Routing,
                    clock: Clock = Clock(), http: Engines | None = None) -> Retired | None:
    """Delete the colour a promotion replaced, after the blueprint's keep window. None when there
    was no other colour to retire.

    While kept, the colour's namespace carries ``pdlift.io/kept-until``: the deploy stage refuses
    to bring a new candidate up in it, so the retire can never delete someone else's candidate.
    Only a namespace that still carries the mark is deleted."""
    if not previous or previous == promoted:
        return None
    keep = bp.promotion.keep_previous_colour_s
    ns = colour_namespace(bp, previous)
    if routing.presence("v1", "Namespace", ns) != "present":
        return Retired(previous, 0, (), f"{ns} is already gone")
    until = clock.now() + dt.timedelta(seconds=keep)
    routing.annotate("v1", "Namespace", ns, None, {KEPT_ANNOTATION: until.strftime("%Y-%m-%dT%H:%M:%SZ")})
    if keep:
        clock.sleep(keep)
    if deploy_stage.live_colour(bp, routing.kube) == previous:
        routing.annotate("v1", "Namespace", ns, None, {KEPT_ANNOTATION: None})
        return Retired(previous, keep, (), f"production routes to {previous} again; it is kept")
    if KEPT_ANNOTATION not in routing.annotations("v1", "Namespace", ns):
        return Retired(previous, keep, (), f"{ns} was deleted or deployed again meanwhile; left alone")
    if http is not None:
        wait_in_flight(bp, routing.kube, http, previous, clock)
    return Retired(previous, keep, rollback(bp, previous, routing).deleted)


def record_baseline(state_dir: Path, bp: Blueprint, summaries: list[ScenarioSummary], run_id: str, colour: str,
                    now: dt.datetime | None = None, build: str = "") -> Path:
    """The promoted run becomes the baseline: the current document, plus a copy kept per version.
    ``build``: the revision measured (``aa_history.measured_build``), so that a later benchmark of
    the same build is an A/A comparison."""
    created = (now or dt.datetime.now(dt.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    baseline = baseline_from_summaries(summaries, source=f"pdlift run {run_id} ({colour}), promoted",
                                       run_id=run_id, created_at=created, blueprint=bp.name, build=build or None)
    text = dumps_baseline(baseline)
    current = baseline_path(state_dir, bp.name)
    write_atomic(current.parent / bp.name / f"{created.replace(':', '')}-{run_id}.json", text)
    write_atomic(current, text)
    return current
