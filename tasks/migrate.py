"""The migrate flow's steps: which stage runs how, what "already done" means, and the summary.

Each stage is its own flow (a subflow here, so the Prefect UI groups it); this module only
dispatches to them, reads and writes the run ledger, and reports a failure clearly.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import time
from collections.abc import Callable

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from blueprints.loader import load_blueprint
from blueprints.schema import Blueprint
from tasks.adapters.ledger_store import LedgerStore
from tasks.errors import ConfigError, PdliftError
from tasks.planning import ledger as ledger_plan
from tasks.planning import resume
from tasks.runs import aws_adapters, open_run


def run_id_for(blueprint_path: str, run_id: str | None) -> str:
    return open_run(load_blueprint(blueprint_path), run_id).identity.run_id


def check_capacity_block_approval(bp: Blueprint, approved: bool) -> None:
    if bp.aws.capacity.mode == "capacity-block" and not approved:
        raise ConfigError("the blueprint buys a Capacity Block (paid upfront, cannot be cancelled); "
                          "start the run with approve_capacity_block_purchase = true to allow it")


# --- stages ---------------------------------------------------------------------------------


def fleet_ssh_nodes(blueprint_path: str, run_id: str) -> list:
    """The launched nodes as SSH targets, host keys pinned from each instance's console output."""
    from tasks.adapters.ssh_connect import SshNode
    from tasks.adapters.ssh_hostkeys import parse_console_output

    bp = load_blueprint(blueprint_path)
    fleet = open_run(bp, run_id).ledger.outputs.get("launch") or {}
    instances = aws_adapters(bp).instances
    return [SshNode(n["instance_id"], n["address"],
                    tuple(parse_console_output(instances.console_output(n["instance_id"]))), bp.aws.ssh.port)
            for n in fleet.get("nodes", [])]


def _reserve(bp_path: str, run_id: str, image: str | None) -> dict:
    from flows.reserve_capacity import reserve_capacity_flow

    return reserve_capacity_flow(bp_path, run_id)


def _launch(bp_path: str, run_id: str, image: str | None) -> dict:
    from flows.launch_nodes import launch_nodes_flow

    return launch_nodes_flow(bp_path, run_id)


def _fabric(bp_path: str, run_id: str, image: str | None) -> dict:
    from flows.validate_fabric import validate_fabric_flow

    return validate_fabric_flow(bp_path, run_id)


def _weights(bp_path: str, run_id: str, image: str | None) -> dict:
    from flows.stage_weights import stage_weights

    # write_manifest: objects with no S3 checksum are hashed once into pdlift-manifest.json (reused after)
    progress = stage_weights(bp_path, fleet_ssh_nodes(bp_path, run_id), write_manifest=True)
    return {"nodes": {p.node: {"bytes_total": p.bytes_total, "bytes_fetched": p.bytes_fetched,
                               "seconds": round(p.seconds, 1)} for p in progress},
            "bytes_fetched": sum(p.bytes_fetched for p in progress)}


def _deploy(bp_path: str, run_id: str, image: str | None) -> dict:
    from flows.deploy import deploy_flow

    return deploy_flow(bp_path, None, run_id)


def _benchmark(bp_path: str, run_id: str, image: str | None) -> dict:
    from flows.benchmark_gate import benchmark_gate_flow

    deployed = _ledger(bp_path, run_id).outputs.get("deploy") or {}
    return benchmark_gate_flow(bp_path, deployed.get("colour"), run_id, generation=deployed.get("generation", ""))


SELF_RECORDING = {"reserve", "launch", "deploy"}  # their own tasks record richer outputs

RUNNERS: dict[str, Callable[[str, str, str | None], dict]] = {
    "reserve": _reserve, "launch": _launch, "fabric": _fabric,
    "weights": _weights, "deploy": _deploy, "benchmark": _benchmark,
}


def run_stage(stage: str, blueprint_path: str, run_id: str, engine_image: str | None) -> dict:
    started = time.monotonic()
    output = RUNNERS[stage](blueprint_path, run_id, engine_image) or {}
    seconds = round(time.monotonic() - started, 1)
    if stage not in SELF_RECORDING:
        open_run(load_blueprint(blueprint_path), run_id).stage_done(stage, _jsonable(output))
    return {"stage": stage, "status": "done", "seconds": seconds, "output": _jsonable(output)}


def _jsonable(value) -> dict:
    return json.loads(json.dumps(value, default=str)) if isinstance(value, dict) else {"result": str(value)}


def _ledger(blueprint_path: str, run_id: str):
    return open_run(load_blueprint(blueprint_path), run_id).ledger


# --- resume ---------------------------------------------------------------------------------


@task(cache_policy=NO_CACHE)
def stages_to_skip(blueprint_path: str, run_id: str, wanted: list[str], rerun: list[str]) -> list[str]:
    """The leading stages an earlier attempt of this run did whose results still hold
    (``tasks.planning.resume``). The ledger is read once, and each fact is looked up at most once."""
    bp = load_blueprint(blueprint_path)
    ledger = open_run(bp, run_id).ledger
    facts = _Facts(bp, ledger)
    return resume.leading_done(wanted, rerun, lambda stage: stage in ledger.stages_done and
                               resume.still_done(stage, ledger, facts.for_stage(stage)))


class _Facts:
    """What exists now, looked up on first need: the reservation, the fleet, the deployed colour."""

    def __init__(self, bp: Blueprint, ledger) -> None:
        self.bp, self.ledger = bp, ledger

    @functools.cached_property
    def _aws(self):
        return aws_adapters(self.bp)

    @functools.cached_property
    def reservation_state(self) -> str | None:
        rid = resume.reservation_id(self.ledger)
        found = self._aws.capacity.reservation(rid) if rid else None
        return found.state if found else None

    @functools.cached_property
    def running(self) -> frozenset[str]:
        ids = resume.launched_ids(self.ledger)
        return frozenset(i.instance_id for i in self._aws.instances.describe(ids=ids)
                         if i.state == "running") if ids else frozenset()

    @functools.cached_property
    def colour_state(self) -> tuple[bool, str | None]:
        colour = resume.deployed_colour(self.ledger)
        return _colour_state(self.bp, colour) if colour else (False, None)

    def for_stage(self, stage: str) -> resume.Observed:
        if stage == "reserve":
            return resume.Observed(reservation_state=self.reservation_state)
        if stage in ("deploy", "benchmark"):
            return resume.Observed(None, self.running, *self.colour_state)
        return resume.Observed(running=self.running)


def _colour_state(bp: Blueprint, colour: str) -> tuple[bool, str | None]:
    """(the colour's namespace and router exist, the colour production routes to)."""
    from tasks.adapters.promotion import ServiceRouting
    from tasks.deploy import kube_api_client
    from tasks.planning.manifests.common import colour_namespace, stable_namespace
    from tasks.planning.manifests.router import router_name
    from tasks.stages.promote import live_colour

    with kube_api_client(bp) as api:
        routing = ServiceRouting(api)
        present = (routing.presence("v1", "Namespace", colour_namespace(bp, colour)) == "present" and
                   routing.presence("apps/v1", "Deployment", router_name(colour), stable_namespace(bp)) == "present")
        return present, live_colour(bp, routing)


# --- reporting --------------------------------------------------------------------------------


@task(cache_policy=NO_CACHE)
def report_failure(blueprint_path: str, run_id: str, stage: str, error: BaseException) -> str:
    bp = load_blueprint(blueprint_path)
    ledger = LedgerStore().load(bp.name, run_id)
    live = ledger.live() if ledger else []
    burn = ledger_plan.hourly_burn(ledger) if ledger else 0.0
    lines = [f"## Run {run_id} failed at stage `{stage}`", "",
             f"**Why:** {type(error).__name__}: {error}", "",
             f"**Still existing ({len(live)}), billing ${burn:,.2f}/h:**", ""]
    lines += [f"- {e.kind} `{e.resource_id}` {e.zone}".rstrip() for e in live] or ["- nothing"]
    lines += ["", "**Next:** fix the cause and re-run with the same run id to continue, or release everything:",
              "", f"    pdlift teardown {blueprint_path} --run-id {run_id}", ""]
    markdown = "\n".join(lines)
    create_markdown_artifact(markdown=markdown, key=f"failed-{bp.name}", description=f"run {run_id} failed")
    log = get_run_logger()
    log.error("stage %s failed: %s", stage, error, exc_info=not isinstance(error, PdliftError))
    log.error("still billing $%.2f/h for %d resource(s); tear down with: pdlift teardown %s --run-id %s",
              burn, len(live), blueprint_path, run_id)
    return markdown


@task(cache_policy=NO_CACHE)
def finish(blueprint_path: str, run_id: str, summary: list[dict]) -> dict:
    bp = load_blueprint(blueprint_path)
    ledger = open_run(bp, run_id).ledger
    now = dt.datetime.now(dt.timezone.utc)
    bench = ledger.outputs.get("benchmark") or {}
    verdict = bench.get("decision") or bench.get("outcome") or "not run"
    if bench.get("outcome"):
        verdict = f"{verdict} -> {bench['outcome']}"
    rows = "\n".join(f"| {s['stage']} | {s['status']} | {s['seconds']} |" for s in summary)
    markdown = (f"## Migration {bp.name}, run {run_id}\n\n| stage | status | seconds |\n|---|---|---|\n{rows}\n\n"
                f"Gate verdict: **{verdict}**\n\n" + ledger_plan.render_markdown(ledger, now))
    create_markdown_artifact(markdown=markdown, key=f"migration-{bp.name}", description=f"run {run_id}")
    return {"run_id": run_id, "stages": summary, "verdict": verdict,
            "spend_by_stage": ledger_plan.spend_by_stage(ledger, now),
            "hourly_burn": ledger_plan.hourly_burn(ledger)}
