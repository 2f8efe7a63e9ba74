"""The deployment's A/A history in the state store (``tasks.planning.aa_offsets``): which build a
colour runs, recording an unchanged build's offset to its baseline, and the recorded baseline
with the between-session spread that history shows."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from blueprints.schema import Blueprint
from tasks.adapters.ledger_store import write_atomic
from tasks.errors import PdliftError
from tasks.planning import aa_offsets
from tasks.planning.bench_baseline import Baseline
from tasks.planning.gate import GateReport
from tasks.planning.manifests.common import DECODE, PREFILL, REVISION_LABEL, colour_namespace
from tasks.planning.manifests.pods import LWS_API
from tasks.planning.metrics import ScenarioSummary
from tasks.planning.ttft_probe import Probes

__all__ = ["aa_key", "history_path", "measured_build", "read_build", "read_history", "record_offsets",
           "with_history"]


def aa_key(deployment: str) -> str:
    """The A/A history in the state store (a folder of its own: no deployment's name can make it
    another's baseline)."""
    return f"aa-offsets/{deployment}.json"


def history_path(state_dir: Path, deployment: str) -> Path:
    return Path(state_dir) / aa_key(deployment)


def measured_build(bp: Blueprint, kube, colour: str) -> str:
    """What a benchmark of ``colour`` measures: the revision label both roles' engines run (what
    ``render.stack_revision`` hashed: image, weights, every engine argument) and the benchmark's
    ``workload``; '' when a role is missing or the roles differ (a rolling update part-way)."""
    ns = colour_namespace(bp, colour)
    labels = {(((kube.get(LWS_API, "LeaderWorkerSet", role, ns) or {}).get("metadata") or {}).get("labels") or {})
              .get(REVISION_LABEL, "") for role in (PREFILL, DECODE)}
    revision = labels.pop() if len(labels) == 1 else ""
    return f"{revision}/{aa_offsets.workload(bp)}" if revision else ""


def read_build(bp: Blueprint, kube, colour: str) -> tuple[str, str]:
    """(``measured_build``, '') or ('', why it could not be read): the callers go on without it."""
    try:
        return measured_build(bp, kube, colour), ""
    except PdliftError as e:
        return "", str(e)


def read_history(state_dir: Path, deployment: str) -> list[aa_offsets.Comparison]:
    path = history_path(state_dir, deployment)
    return aa_offsets.loads_history(path.read_text(), str(path)) if path.exists() else []


def with_history(state_dir: Path, baseline: Baseline) -> Baseline:
    """A recorded baseline (one with a build) with its deployment's between-session spread."""
    if not baseline.build or not baseline.blueprint:
        return baseline
    return aa_offsets.with_between(baseline, read_history(state_dir, baseline.blueprint))


def record_offsets(state_dir: Path, bp: Blueprint, summaries: list[ScenarioSummary], baseline: Baseline, build: str,
                   key: str, report: GateReport, seed: int = 0, now: dt.datetime | None = None,
                   history: list[aa_offsets.Comparison] | None = None) -> tuple[aa_offsets.Comparison | None, str]:
    """When ``build`` is the recorded baseline's own, its offsets join the history (``history``:
    as already read, else read here), unless ``aa_offsets.unfit`` says why not; ``key``: the run
    and deploy generation measured. Returns the comparison recorded (or None) and why none was
    ('' when it is not an A/A measurement)."""
    if not aa_offsets.is_aa(baseline, build):
        return None, ""
    offsets = aa_offsets.offsets_of(summaries, baseline, seed, skip=Probes.of(bp).scenarios)
    why = aa_offsets.unfit(report, offsets, aa_offsets.tightest_margin(bp)) or ("" if offsets else "no point with samples")
    if why:
        return None, why
    created = (now or dt.datetime.now(dt.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    comparison = aa_offsets.Comparison(key, created, build, str(baseline.run_id), offsets)
    history = aa_offsets.appended(read_history(state_dir, bp.name) if history is None else history, comparison)
    write_atomic(history_path(state_dir, bp.name), aa_offsets.dumps_history(history))
    return comparison, ""
