"""Stage 3: prove the GPUs, the EFA devices and the links of every node, and replace bad nodes.

Layers stop early (docs/sources.md#fabric-layers): 1 inventory, 2 per-NIC loopback with a
negative control, 3 single-node all_reduce, 4 pairwise round robin (+ second pass), 5 the whole
set. A node judged ISOLATE is handed to ``replace`` (terminate, relaunch through the launch
stage's pieces, pin the new host keys), then validated again; nodes already validated keep
their results. When a node's slot has used ``fabric.replace_attempts`` replacements, when a
failure cannot be pinned on a node, or when every node fails the same layer (a common cause:
image, driver, flags; replacing the fleet would not help), the outcome fails naming the nodes
and the evidence.

The SSH shell is injected (``Runner``), as are the replacement, the log and the progress
callback, so the procedure runs unchanged against real p5en nodes and the sandbox's. Progress is
units per layer (``tasks.planning.fabric.plan``): each pass plans its own when it starts (what an
earlier pass measured is not run again), and a pass that passes ends with every unit done.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from blueprints.schema import Blueprint, FabricSpec
from tasks.errors import PdliftError
from tasks.planning.fabric import commands, node_verdicts, report
from tasks.planning.fabric.outcome import Cache, Layer, Outcome, PassResult
from tasks.planning.fabric.plan import layers_for, pass_units
from tasks.planning.records import FabricVerdict, Fleet, Node, Replacement
from tasks.stages import fabric_layers as layers
from tasks.stages.fabric_exec import Runner
from tasks.stages.fabric_layers import Ctx, OnProgress
from tasks.stages.fabric_pairs import pairwise
from tasks.stages.fabric_results import ResultsDir, results_dir
from tasks.stages.nodes import NodeLifecycle, ssh_target
from tasks.stages.ports import Progress, Shell

Replace = Callable[[Node, str], Node]  # (node to replace, evidence) -> its pinned successor


STEPS: dict[str, Callable[[Ctx, list[Node]], Layer]] = {
    "inventory": layers.inventory, "loopback": layers.loopback, "single-node": layers.single_node,
    "pairwise": pairwise, "full-set": layers.full_set,
}


def _run_pass(ctx: Ctx, number: int, nodes: list[Node]) -> PassResult:
    start = time.monotonic()
    steps = [STEPS[name] for name in layers_for(len(nodes))]
    result = PassResult(number, tuple(nodes), layers_expected=len(steps))
    ctx.tally.begin(pass_units([n.name for n in nodes], ctx.cache))
    ctx.report()
    for step in steps:
        layer = step(ctx, nodes)
        result.layers.append(layer)
        ctx.log(f"  {layer.name}: {len(layer.isolate)} to isolate"
                + (f"; stop: {layer.stop}" if layer.stop else "") + f" ({layer.seconds:.1f} s)")
        if layer.isolate or layer.stop:
            break  # stop early: later layers would only repeat what this one found
    by_layer = [layer.records for layer in result.layers]
    result.node_records = node_verdicts([n.name for n in nodes], *by_layer)
    result.seconds = time.monotonic() - start
    return result


def _failure(names: Sequence[str], isolate: dict[str, str], why: str) -> str:
    return "; ".join(f"node {n} is ISOLATE ({why}): {isolate[n]}" for n in names)


def validate(spec: FabricSpec, nodes: Sequence[Node], runner: Runner, *, replace: Replace | None = None,
             log: Callable[[str], None] = lambda msg: None, port_base: int | None = None,
             on_progress: OnProgress | None = None) -> Outcome:
    """Validate ``nodes`` layer by layer, replacing ISOLATE nodes within the blueprint's bounds.

    Raises ``HostKeyMismatch`` when a node's host key is not the pinned one (nothing is run on
    it) and ``StageFailed`` when the SSH key is refused; every other failure is in the Outcome.
    ``on_progress(counts, final)``: units done of planned per layer, on this thread.
    """
    start = time.monotonic()
    fleet = list(nodes)
    if port_base is None:
        port_base = random.SystemRandom().randrange(commands.PORT_LOW, commands.PORT_LOW + commands.PORT_SPAN)
    ctx = Ctx(spec, runner, log, port_base, on_progress=on_progress)
    slots = _Slots(fleet, spec.replace_attempts)
    passes: list[PassResult] = []
    runner.prepare([ssh_target(n) for n in fleet])
    for number in range(1, 2 + len(fleet) * spec.replace_attempts):
        log(f"fabric validation pass {number} over {len(fleet)} node(s)")
        result = _run_pass(ctx, number, fleet)
        passes.append(result)
        if result.passed:
            failure = None
            break
        failure = _unreplaceable(result, fleet, slots, replace) or _replace_all(result, fleet, slots, replace, ctx)
        if failure:
            break
    else:
        failure = "fabric validation did not converge within its replacement bound"
    versions = {n.name: ctx.cache.inventory[n.name].versions for n in fleet if n.name in ctx.cache.inventory}
    _nccl_versions(ctx.cache, versions)
    passed = bool(passes) and passes[-1].passed and failure is None
    ctx.report(final=True)
    return Outcome(passed, tuple(fleet), passes, slots.replaced, failure, time.monotonic() - start, versions,
                   ctx.cache)


class _Slots:
    """Replacements per node slot: a replacement inherits its predecessor's slot and its count."""

    def __init__(self, fleet: list[Node], allowed: int):
        self.slot_of = {n.name: n.name for n in fleet}
        self.used: dict[str, int] = {}
        self.allowed = allowed
        self.replaced: list[tuple[str, str, str]] = []  # (old node, new node, evidence)

    def used_by(self, name: str) -> int:
        return self.used.get(self.slot_of[name], 0)

    def took(self, old: str, new: str, evidence: str) -> None:
        slot = self.slot_of[old]
        self.slot_of[new] = slot
        self.used[slot] = self.used.get(slot, 0) + 1
        self.replaced.append((old, new, evidence))


def _unreplaceable(result: PassResult, fleet: list[Node], slots: _Slots, replace: Replace | None) -> str | None:
    """Why the failed pass cannot be fixed by replacing nodes, in words; None when it can."""
    layer = result.layers[-1].name
    if result.stop:
        return f"{layer}: {result.stop}"
    bad = list(result.isolate)
    if len(fleet) >= 2 and len(bad) == len(fleet):
        return (f"{layer}: every node failed, so the cause is common to all (image, driver, tool versions or "
                "flags), not a bad node; nothing was replaced. " + _failure(bad[:2], result.isolate, layer))
    exhausted = [n for n in bad if replace is None or slots.used_by(n) >= slots.allowed]
    if exhausted:
        why = f"{layer}; no replacement left after {slots.used_by(exhausted[0])} of {slots.allowed} allowed"
        return _failure(exhausted, result.isolate, why)
    return None


def _replace_all(result: PassResult, fleet: list[Node], slots: _Slots, replace: Replace | None,
                 ctx: Ctx) -> str | None:
    """Replace each ISOLATE node in place; the failure in words when a replacement fails."""
    if replace is None:  # _unreplaceable has refused the pass already; no way to replace
        return "no replacement is configured"
    for name, evidence in result.isolate.items():
        old = next(n for n in fleet if n.name == name)
        ctx.log(f"replacing {name} ({old.role}): {evidence}")
        try:
            new = replace(old, evidence)
        except PdliftError as e:
            return (f"node {name} is ISOLATE ({result.layers[-1].name}): {evidence}; "
                    f"replacing it failed: {type(e).__name__}: {e}")
        slots.took(name, new.name, evidence)
        ctx.cache.forget(name)
        fleet[fleet.index(old)] = new
        ctx.runner.prepare([ssh_target(new)])
    return None


def _nccl_versions(cache: Cache, versions: dict[str, dict[str, str]]) -> None:
    for node, run in cache.single.items():
        if node in versions and run.result is not None:
            if run.result.nccl_version:
                versions[node]["nccl"] = str(run.result.nccl_version)
            if run.result.nccl_tests_version:
                versions[node]["nccl-tests"] = run.result.nccl_tests_version


@dataclass(frozen=True)
class Validation:
    outcome: Outcome
    markdown: str
    verdict: FabricVerdict


def validate_fleet(bp: Blueprint, run_id: str, fleet: Fleet, nodes: NodeLifecycle, shell: Shell,
                   state_root: Path, log: Progress = lambda msg: None,
                   on_progress: OnProgress | None = None) -> Validation:
    """Stage 3 for a run's fleet: pin its host keys, validate, replace ISOLATE nodes through the
    node lifecycle, write the report and the raw results under the run's state folder."""
    pinned = nodes.pin(fleet.nodes)
    results = ResultsDir(results_dir(state_root, bp.name, run_id))
    outcome = validate(bp.fabric, pinned, Runner(shell, run_id, results.keep),
                       replace=lambda node, evidence: nodes.replace(node, fleet.launch_template_id), log=log,
                       on_progress=on_progress)
    markdown = report.render(outcome, bp.fabric, bp.name, run_id)
    results.write(report.results_json(outcome, bp.fabric, bp.name, run_id, results.tests), markdown)
    # Host keys are pinned again from the console by whoever connects next: the fleet keeps none.
    after = dataclasses.replace(fleet, nodes=tuple(dataclasses.replace(n, host_keys=()) for n in outcome.nodes),
                                replaced=fleet.replaced + tuple(old for old, _, _ in outcome.replaced))
    verdict = FabricVerdict(outcome.passed, outcome.failure, round(outcome.seconds, 1), len(outcome.passes),
                            str(results.root), tuple(Replacement(o, n, e) for o, n, e in outcome.replaced), after)
    return Validation(outcome, markdown, verdict)
