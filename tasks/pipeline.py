"""Thin Prefect tasks for the pipeline runner (``flows/pipeline.py``): the run, its ledger, resume, reporting."""

from __future__ import annotations

import datetime as dt
import functools
import os
import traceback

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from prefect.context import FlowRunContext
from prefect.events import emit_event

from blueprints.loader import load_blueprint
from tasks.adapters import prefect_runs, run_lease
from tasks.adapters.run_lease import this_worker
from tasks.errors import PdliftError
from tasks.planning import ledger as ledger_plan
from tasks.planning import notifications
from tasks.planning import resume
from tasks.planning.identity import artifact_key, check_run_id
from tasks.planning.lease import Holder
from tasks.planning.ledger import Ledger
from tasks.planning.manifests.common import colour_namespace, stable_namespace
from tasks.planning.manifests.router import router_name
from tasks.planning.plan import make_plan
from tasks.planning.records import StageRecord
from tasks.planning.timeline import beside_actual
from tasks.runs import Run, open_run, run_id_of
from tasks.stages.deploy import live_colour
from tasks.wiring import Wiring


@task(cache_policy=NO_CACHE)
def start_run(blueprint_path: str, run_id: str | None, hold: bool = True) -> Run:
    """Read and validate the blueprint (a ConfigError fails the run with the located problem),
    take the run's lease (``hold``; RunHeld when another flow run drives it: nothing touched), and
    read the run's ledger. A run not held is a teardown's: the blueprint only names what to release."""
    bp = load_blueprint(blueprint_path, to_release=not hold)
    wiring = Wiring(bp)
    rid = run_id_of(bp, run_id)
    if hold:  # a run that will work: its id labels the nodes it buys (a teardown may release any run)
        check_run_id(rid)
        log = get_run_logger()
        leases = wiring.leases(log.info)
        lease = run_lease.hold(leases, bp.name, rid, Holder(_flow_run_id(), this_worker()),
                               holder_ended=_flow_run_ended)
        log.info(f"run {rid}: lease held by flow run {lease.flow_run_id or '(none)'} on {lease.worker} "
                 f"until {lease.expires_at}, renewed while it works ({wiring.state.uri})")
        return open_run(bp, blueprint_path, rid, wiring.ledgers, guard=lambda: run_lease.check(leases, bp.name, rid))
    return open_run(bp, blueprint_path, rid, wiring.ledgers)


def _flow_run_id() -> str:
    context = FlowRunContext.get()
    return str(context.flow_run.id) if context and context.flow_run else ""


def _flow_run_ended(flow_run_id: str) -> bool:
    """Whether Prefect says the lease holder's flow run has ended (when it cannot say: wait for the expiry)."""
    return prefect_runs.flow_run_ended(flow_run_id) is True


@task(cache_policy=NO_CACHE)
def record_stage(run: Run, record: StageRecord, release: bool = True) -> None:
    """Record ``record``; ``release``: and give the run's lease up when this flow run took it (a
    stage flow's work is done; a flow that goes on working on the run keeps it)."""
    run.finish_stage(record)
    if release:
        release_run.fn(run)


@task(cache_policy=NO_CACHE)
def release_run(run: Run) -> bool:
    """Give the run's lease up when this flow run took it (a subflow's end keeps its parent's)."""
    with Wiring(run.blueprint) as wiring:
        return run_lease.let_go(wiring.leases(), run.blueprint.name, run.run_id, _flow_run_id())


@task(cache_policy=NO_CACHE)
def publish_ledger(run: Run) -> str:
    return _publish(run.ledger)


def _publish(ledger: Ledger) -> str:
    markdown = ledger_plan.render_markdown(ledger, dt.datetime.now(dt.timezone.utc))
    create_markdown_artifact(markdown=markdown, key=artifact_key("cost-ledger", ledger.deployment),
                             description=f"cost ledger of run {ledger.run_id}")
    return markdown


@task(cache_policy=NO_CACHE)
def publish_ledgers(runs: list[Run]) -> list[str]:
    """The final cost ledger of each run a teardown touched (with end times)."""
    return [_publish(run.ledger) for run in runs]


# --- resume ---------------------------------------------------------------------------------


@task(cache_policy=NO_CACHE)
def stages_to_skip(run: Run, wanted: list[str], rerun: list[str]) -> list[str]:
    """The leading stages an earlier attempt of this run did whose results still hold
    (``tasks.planning.resume``). Each fact is looked up at most once."""
    run.reload()
    with Wiring(run.blueprint) as wiring:
        facts = _Facts(run, wiring)
        return resume.leading_done(wanted, rerun, lambda stage: resume.still_done(stage, run.ledger,
                                                                                    facts.for_stage(stage)))


class _Facts:
    """What exists now, looked up on first need: the reservation, the fleet, the deployed colour."""

    def __init__(self, run: Run, wiring: Wiring) -> None:
        self.run, self.wiring = run, wiring

    @functools.cached_property
    def reservation_state(self) -> str | None:
        rid = resume.reservation_id(self.run.ledger)
        found = self.wiring.capacity.reservation(rid) if rid else None
        return found.state if found else None

    @functools.cached_property
    def running(self) -> frozenset[str]:
        ids = resume.launched_ids(self.run.ledger)
        return frozenset(i.instance_id for i in self.wiring.instances.describe(ids=ids)
                         if i.state == "running") if ids else frozenset()

    @functools.cached_property
    def colour_state(self) -> tuple[bool, str | None]:
        """(the deployed colour's namespace and router exist, the colour production routes to)."""
        colour = resume.deployed_colour(self.run.ledger)
        if not colour:
            return False, None
        bp, routing = self.run.blueprint, self.wiring.routing
        present = (routing.presence("v1", "Namespace", colour_namespace(bp, colour)) == "present" and
                   routing.presence("apps/v1", "Deployment", router_name(colour), stable_namespace(bp)) == "present")
        return present, live_colour(bp, self.wiring.kube)

    def for_stage(self, stage: str) -> resume.Observed:
        if stage == "reserve":
            return resume.Observed(reservation_state=self.reservation_state)
        if stage in ("deploy", "benchmark"):
            return resume.Observed(None, self.running, *self.colour_state)
        return resume.Observed(running=self.running)


# --- reporting --------------------------------------------------------------------------------


@task(cache_policy=NO_CACHE)
def report_failure(run: Run, stage: str, error: BaseException) -> str:
    run.reload()
    ledger, bp = run.ledger, run.blueprint
    live, burn = ledger.live(), ledger_plan.hourly_burn(ledger)
    # An exception may quote what it was given (a URL with its token, a password): the artifact,
    # the log and the event get it redacted (tasks.planning.notifications.redact).
    secrets = notifications.secret_values(os.environ)
    why = notifications.redact(f"{type(error).__name__}: {error}", secrets)
    lines = [f"## Run {run.run_id} failed at stage `{stage}`", "",
             f"**Why:** {why}", "",
             f"**Still existing ({len(live)}), billing ${burn:,.2f}/h:**", ""]
    lines += [f"- {e.kind} `{e.resource_id}` {e.zone}".rstrip() for e in live] or ["- nothing"]
    lines += ["", "**Next:** fix the cause and re-run with the same run id to continue, or release everything:",
              "", f"    pdlift teardown {run.blueprint_path} --run-id {run.run_id}", ""]
    markdown = "\n".join(lines)
    create_markdown_artifact(markdown=markdown, key=artifact_key("failed", bp.name),
                             description=f"run {run.run_id} failed")
    log = get_run_logger()
    trace = "" if isinstance(error, PdliftError) else \
        "\n" + notifications.redact("".join(traceback.format_exception(error)), secrets).rstrip()
    log.error("stage %s failed: %s%s", stage, why, trace)
    log.error("still billing $%.2f/h for %d resource(s); tear down with: pdlift teardown %s --run-id %s",
              burn, len(live), run.blueprint_path, run.run_id)
    if live:  # for automations (deploy/automations.yaml): someone must act, or it bills on
        emit_event(**notifications.failed_billing_event(bp.name, run.run_id, run.blueprint_path, stage, error,
                                                        live, burn, os.environ))
    return markdown


@task(cache_policy=NO_CACHE)
def finish(run: Run, summary: list[dict]) -> dict:
    run.reload()
    ledger, bp = run.ledger, run.blueprint
    now = dt.datetime.now(dt.timezone.utc)
    gate = ledger.gate()
    verdict = f"{gate.decision} -> {gate.outcome}" if gate else "not run"
    timeline = make_plan(bp).timeline
    rows = "\n".join(beside_actual(timeline, summary))
    markdown = (f"## Migration {bp.name}, run {run.run_id}\n\n{rows}\n\n"
                f"(Projected: the fleet on real AWS, `pdlift plan {run.blueprint_path}` says how.)\n\n"
                f"Gate verdict: **{verdict}**\n\n" + ledger_plan.render_markdown(ledger, now))
    for row in summary:
        projected = timeline.of(row["stage"])
        if projected is not None:
            row.update(projected_s=round(projected.expected_s, 1), projected_worst_s=round(projected.worst_s, 1))
    create_markdown_artifact(markdown=markdown, key=artifact_key("migration", bp.name), description=f"run {run.run_id}")
    release_run.fn(run)
    return {"run_id": run.run_id, "stages": summary, "verdict": verdict,
            "spend_by_stage": ledger_plan.spend_by_stage(ledger, now), "hourly_burn": ledger_plan.hourly_burn(ledger)}
