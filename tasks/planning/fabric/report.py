"""The fabric report (markdown artifact) and the results document kept per run. Pure.

``results_json`` is what ``<state>/runs/<deployment>/<run_id>/fabric/results.json`` holds:
thresholds, verdicts with their checks, figures per node, pair and collective, versions, and
every command with its exit status and timing (the stage's ``ResultsDir`` writes it).
"""

from __future__ import annotations

import math

from blueprints.schema import FabricSpec
from tasks.parsing.nccl_model import busbw_at
from tasks.planning.fabric.outcome import Outcome, PassResult
from tasks.planning.fabric.pairing import pair_key, pair_name
from tasks.planning.fabric.records import NcclRun, Verdict, human_size, to_json

MARK = {Verdict.PASS: "PASS", Verdict.MONITOR: "MONITOR", Verdict.ISOLATE: "**ISOLATE**"}


def _bw(run: NcclRun | None, spec: FabricSpec) -> float | None:
    if run is None or run.result is None:
        return None
    value = busbw_at(run.result, spec.judge_size_bytes)
    return value if value is not None and math.isfinite(value) else None


def _fmt(value: float | None, floor: float | None = None) -> str:
    if value is None:
        return "-"
    text = f"{value:.1f}"
    return text + (" ✗" if floor is not None and value < floor else "")


def figures(outcome: Outcome, spec: FabricSpec) -> dict:
    cache = outcome.cache
    names = [n.name for n in outcome.nodes]
    pairs = {}
    for (a, b), pr in cache.pairs.items():
        if a in names and b in names:
            latency = pr.pingpong.result.latency_us() if pr.pingpong and pr.pingpong.result else None
            pairs[pair_name((a, b))] = {**{r.name: _bw(r, spec) for r in pr.nccl}, "pingpong_latency_us": latency}
    return {
        "judge_size_bytes": spec.judge_size_bytes,
        "single_node_all_reduce_busbw_gbs": {n: _bw(cache.single.get(n), spec) for n in names},
        "pairs_busbw_gbs": pairs,
        "full_set_busbw_gbs": {r.name: _bw(r, spec) for r in cache.full_set},
        "loopback_latency_us": {f"{node}/{dev}": (run.result.latency_us() if run.result else None)
                                for (node, dev), run in cache.loopback.items() if node in names},
    }


def results_json(outcome: Outcome, spec: FabricSpec, deployment: str, run_id: str, tests: list[dict]) -> dict:
    return {
        "deployment": deployment, "run_id": run_id, "passed": outcome.passed, "failure": outcome.failure,
        "seconds": round(outcome.seconds, 2), "thresholds": spec.model_dump(),
        "nodes": [{"instance_id": n.name, "node": n.node_name, "address": n.address, "role": n.role}
                  for n in outcome.nodes],
        "replaced": [{"old": o, "new": n, "evidence": e} for o, n, e in outcome.replaced],
        "versions": outcome.versions, "figures": figures(outcome, spec),
        "passes": [{"number": p.number, "seconds": round(p.seconds, 2), "node_verdicts": to_json(p.node_records),
                    "layers": [{"name": layer.name, "seconds": round(layer.seconds, 2), "rounds": layer.rounds,
                                "isolate": layer.isolate, "stop": layer.stop, "leftovers": layer.leftovers,
                                "records": to_json(layer.records)} for layer in p.layers]}
                   for p in outcome.passes],
        "tests": tests,
    }


def _layer(p: PassResult, name: str):
    return next((layer for layer in p.layers if layer.name == name), None)


def _node_rows(outcome: Outcome, spec: FabricSpec, last: PassResult) -> list[str]:
    cache, verdicts = outcome.cache, {r.subject: r for r in last.node_records}
    loop, pairs = _layer(last, "loopback"), _layer(last, "pairwise")
    rows = ["| node | role | address | GPUs | EFA devices | NIC loopbacks | negative control | "
            f"all_reduce @ {human_size(spec.judge_size_bytes)} (GB/s) | pairwise | verdict |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for n in outcome.nodes:
        inv = cache.inventory.get(n.name)
        gpus = f"{len(inv.gpus.gpus)}/{spec.gpus}" if inv and inv.gpus else "-"
        efa = f"{inv.fi_info.device_count('efa')}/{spec.efa_devices}" if inv and inv.fi_info else "-"
        nics = [r for r in (loop.records if loop else ()) if r.scope == "nic" and r.nodes == (n.name,)]
        nic_text = f"{sum(r.verdict is Verdict.PASS for r in nics)}/{len(nics)} pass" if nics else "-"
        control = cache.control.get(n.name)
        control_text = "-" if control is None else (
            "failed (as required)" if (control.exit_code not in (None, 0) or control.timed_out
                                       or control.result is None or not control.result.ok) else "**passed**")
        attribution = next((r.verdict.value for r in (pairs.records if pairs else ())
                            if r.scope == "node" and r.subject == n.name), "-")
        verdict = verdicts.get(n.name)
        rows.append(f"| {n.name} | {n.role} | {n.address} | {gpus} | {efa} | {nic_text} | {control_text} | "
                    f"{_fmt(_bw(cache.single.get(n.name), spec), spec.single_node_allreduce_busbw_gbs)} | "
                    f"{attribution} | {MARK[verdict.verdict] if verdict else '-'} |")
    return rows


def _matrix(outcome: Outcome, spec: FabricSpec) -> list[str]:
    names = [n.name for n in outcome.nodes]
    rows = ["| | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for a in names:
        cells = []
        for b in names:
            pr = outcome.cache.pairs.get(pair_key(a, b)) if a != b else None
            run = next((r for r in pr.nccl if r.name == "all_reduce"), None) if pr else None
            cells.append("·" if a == b else _fmt(_bw(run, spec), spec.pair_allreduce_busbw_gbs))
        rows.append(f"| **{a}** | " + " | ".join(cells) + " |")
    return rows


def _pair_rows(last: PassResult, outcome: Outcome, spec: FabricSpec) -> list[str]:
    layer = _layer(last, "pairwise")
    if layer is None:
        return ["_not run in the last pass (an earlier layer stopped it)_"]
    floors = {"all_reduce": spec.pair_allreduce_busbw_gbs, "alltoall": spec.pair_alltoall_busbw_gbs,
              "sendrecv": spec.pair_sendrecv_busbw_gbs}
    rows = [f"Rounds run in the last pass: {layer.rounds}.", "",
            "| pair | all_reduce | alltoall | sendrecv | fi_pingpong latency (us) | verdict | reasons |",
            "|---|---|---|---|---|---|---|"]
    tables = {**{pair_name(k): v for k, v in outcome.cache.pairs.items()},
              **{f"{pair_name(k)} (second pass)": v for k, v in outcome.cache.second_pass.items()}}
    for r in (r for r in layer.records if r.scope == "pair"):
        pr = tables.get(r.subject)
        bws = {run.name: _bw(run, spec) for run in pr.nccl} if pr else {}
        lat = pr.pingpong.result.latency_us() if pr and pr.pingpong and pr.pingpong.result else None
        rows.append(f"| {r.subject} | " + " | ".join(_fmt(bws.get(c), floors[c]) for c in floors)
                    + f" | {_fmt(lat, None)}{' ✗' if lat is not None and lat > spec.max_pingpong_latency_us else ''}"
                    + f" | {MARK[r.verdict]} | {'; '.join(r.reasons[:2])[:300]} |")
    return rows


def render(outcome: Outcome, spec: FabricSpec, deployment: str, run_id: str) -> str:
    last = outcome.passes[-1]
    size = human_size(spec.judge_size_bytes)
    lines = [f"# Fabric validation: {deployment} run {run_id}: {'PASS' if outcome.passed else 'FAIL'}", "",
             f"{len(outcome.nodes)} node(s), {len(outcome.passes)} pass(es), {len(outcome.replaced)} "
             f"replacement(s), {outcome.seconds:.1f} s.", ""]
    if outcome.failure:
        lines += [f"**Failure:** {outcome.failure}", ""]
    lines += [_thresholds(spec), "",
              "## Nodes", "", *_node_rows(outcome, spec, last), "",
              f"## Pair matrix: all_reduce busbw at {size} (GB/s)", "", *_matrix(outcome, spec), "",
              "## Pairs", "", *_pair_rows(last, outcome, spec), ""]
    lines += _whole_set(outcome, spec) + _passes(outcome) + _flagged(last) + _versions(outcome)
    return "\n".join(lines) + "\n"


def _thresholds(spec: FabricSpec) -> str:
    return ("Thresholds (blueprint `fabric`): "
            f"{spec.gpus} GPUs and {spec.efa_devices} EFA devices per node; busbw at "
            f"{human_size(spec.judge_size_bytes)}: single node all_reduce ≥ {spec.single_node_allreduce_busbw_gbs:g}, "
            f"pair all_reduce ≥ {spec.pair_allreduce_busbw_gbs:g}, alltoall ≥ {spec.pair_alltoall_busbw_gbs:g}, "
            f"sendrecv ≥ {spec.pair_sendrecv_busbw_gbs:g} GB/s; fi_pingpong latency ≤ "
            f"{spec.max_pingpong_latency_us:g} us; outliers beyond a robust score of {spec.outlier_mad_threshold:g} "
            f"MONITOR; timeout {spec.test_timeout_s} s per test; at most {spec.replace_attempts} replacement(s) per "
            "node. ✗ marks a figure below its floor.")


def _whole_set(outcome: Outcome, spec: FabricSpec) -> list[str]:
    if not outcome.cache.full_set:
        return []
    lines = [f"## Whole set ({len(outcome.nodes)} nodes)", "", "| collective | busbw (GB/s) | EFA evidence |",
             "|---|---|---|"]
    for run in outcome.cache.full_set:
        ev = run.result.evidence.efa if run.result is not None else False
        lines.append(f"| {run.name} | {_fmt(_bw(run, spec))} | {'yes' if ev else '**no**'} |")
    return lines + [""]


def _passes(outcome: Outcome) -> list[str]:
    lines = ["## Passes", ""]
    for p in outcome.passes:
        steps = ", ".join(f"{layer.name} {layer.seconds:.1f} s" for layer in p.layers)
        lines.append(f"- pass {p.number} ({p.seconds:.1f} s): {steps}")
        for layer in p.layers:
            for node, evidence in layer.isolate.items():
                lines.append(f"  - {layer.name} isolated {node}: {evidence[:400]}")
            for node, found in layer.leftovers.items():
                lines.append(f"  - leftover processes on {node}: {'; '.join(found)[:300]}")
    return lines + [f"- replaced {old} with {new}" for old, new, _ in outcome.replaced]


def _flagged(last: PassResult) -> list[str]:
    flagged = [r for layer in last.layers for r in layer.records if r.verdict is not Verdict.PASS]
    if not flagged:
        return []
    return ["", "## Checks not passing (last pass)", ""] + [
        f"- {MARK[r.verdict]} {r.subject}: {'; '.join(r.reasons[:3])[:400]}" for r in flagged[:60]]


def _versions(outcome: Outcome) -> list[str]:
    keys = sorted({k for v in outcome.versions.values() for k in v})
    if not keys:
        return []
    lines = ["", "## Versions", "", "| node | " + " | ".join(keys) + " |", "|---|" + "---|" * len(keys)]
    return lines + [f"| {node} | " + " | ".join(v.get(k, "-") for k in keys) + " |"
                    for node, v in outcome.versions.items()]
