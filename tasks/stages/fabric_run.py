"""Stage 3 for one run: the launched fleet from the ledger, pinned, validated, reported, persisted.

This is what the Prefect task calls; it builds the adapters from the blueprint (per call, never
at import time), hands the procedure its SSH shell and its replacer, and keeps the results under
``<PDLIFT_STATE_DIR>/runs/<deployment>/<run_id>/fabric/``.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tasks.adapters import eks as eks_adapter
from tasks.adapters.kube_nodes import KubeNodes
from tasks.adapters.ledger_store import state_dir
from tasks.adapters.ssh import NodeShell, SshSettings
from tasks.errors import ConfigError, StageFailed
from tasks.runs import Run, aws_adapters
from tasks.stages import fabric as fabric_stage
from tasks.stages import fabric_report
from tasks.stages.fabric_exec import Runner
from tasks.stages.fabric_replace import Replacer, pin_fleet

_PATH_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


@dataclass(frozen=True)
class Validation:
    outcome: fabric_stage.Outcome
    markdown: str
    summary: dict
    results_dir: Path


def results_dir(deployment: str, run_id: str, root: Path | None = None) -> Path:
    for what, value in (("deployment", deployment), ("run id", run_id)):
        if not _PATH_SAFE.match(value) or ".." in value:
            raise ConfigError(f"{what} {value!r} cannot name a results folder (letters, digits, '.', '_', '-')")
    return (root or state_dir()) / "runs" / deployment / run_id / "fabric"


def validate_run(run: Run, log: Callable[[str], None], ssh: SshSettings | None = None) -> Validation:
    """Validate the fabric of the run's launched fleet, replacing ISOLATE nodes through EC2/EKS."""
    bp, rid = run.blueprint, run.identity.run_id
    launched = run.ledger.outputs.get("launch")
    if not launched or not launched.get("nodes"):
        raise StageFailed(f"run {rid} has no launched fleet: run `pdlift launch {bp.name}` first")
    aws = aws_adapters(bp)
    cluster = eks_adapter.describe_cluster(aws.eks, bp.aws.eks.cluster)
    kube = KubeNodes(eks_adapter.api_client(cluster, aws.sts))
    zone = (run.ledger.outputs.get("reserve") or {}).get("zone") or launched["nodes"][0]["zone"]
    replacer = Replacer(bp, run.identity, launched["launch_template_id"], zone, aws.instances, kube, run.record,
                        ended=lambda iid: run.ended("instance", iid, dt.datetime.now(dt.timezone.utc)))
    nodes = pin_fleet(launched["nodes"], aws.instances)
    results = fabric_report.ResultsDir(results_dir(bp.name, rid))
    with NodeShell(ssh or SshSettings.from_spec(bp.aws.ssh)) as shell:
        outcome = fabric_stage.validate(bp.fabric, nodes, Runner(shell, rid, results.keep), replace=replacer, log=log)
    markdown = fabric_report.render(outcome, bp.fabric, bp.name, rid)
    results.write(fabric_report.results_json(outcome, bp.fabric, bp.name, rid, results.tests), markdown)
    if outcome.replaced:  # later stages (weights, serving) read the fleet from here
        run.stage_done("launch", _fleet_with(launched, outcome))
    summary = {"passed": outcome.passed, "failure": outcome.failure, "seconds": round(outcome.seconds, 1),
               "passes": len(outcome.passes), "results": str(results.root),
               "replaced": [{"old": o, "new": n} for o, n, _ in outcome.replaced],
               "nodes": [{"instance_id": n.name, "address": n.address, "role": n.role} for n in outcome.nodes]}
    if outcome.passed:
        run.stage_done("fabric", summary)
    return Validation(outcome, markdown, summary, results.root)  # type: ignore[arg-type]


def _fleet_with(launched: dict, outcome: fabric_stage.Outcome) -> dict:
    nodes = [{"instance_id": n.name, "node_name": n.node_name, "address": n.address, "zone": n.zone,
              "role": n.role, "network_nodes": list(n.network_nodes)} for n in outcome.nodes]
    replaced = list(launched.get("replaced", [])) + [old for old, _, _ in outcome.replaced]
    return {**launched, "nodes": nodes, "replaced": replaced}

