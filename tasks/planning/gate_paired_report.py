"""The paired gate's verdict at a look, as a ``GateReport`` (the report, the table artifacts and
``pdlift status`` read it as any other), and its windows in words. Pure.

What decides: the paired checks (``gate_paired.look``: contracts and guards, PASS within the
margin, FAIL significantly beyond it), per point the candidate's error rate against
``gate.max_error_rate`` (a FAIL, as in the unpaired gate) and the candidate's ``gate.slo`` (the
unpaired gate's SLO checks: a candidate as slow as the live colour is still held to them). A
point whose load client saturated measured the client, not the colours, and a point where the
colour it is compared with failed requests compared nothing: the gate cannot PASS on either.
``gate.rules`` are the recorded path's (a recreate, a rolling update in place): not judged here.
A TTFT probe's point weighs in the TTFT contract and guard only (``paired_windows.checks``), and
only once its KV transfers are shown (``tasks.planning.ttft_probe``): until then its windows are
left out, so every check it weighs in has no estimate, and a row says why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from blueprints.schema import GateSpec
from tasks.planning.bench_judge import Verdict, fmt
from tasks.planning.gate import GateReport, GateRow, PointStop, evaluate_gate, transfer_row
from tasks.planning.gate_paired import Check, Estimate, Levels, LookResult, Point, WindowSums, jackknife, look
from tasks.planning.metrics import ScenarioSummary
from tasks.planning.ttft_probe import Probes

Windows = Mapping[str, Mapping[Point, Sequence[WindowSums]]]   # family -> point -> windows so far


@dataclass(frozen=True)
class PointHealth:
    """What a point's candidate rounds say about themselves."""

    requests: int
    errors: int
    saturation: str | None = None      # the load client's own saturation, when it happened
    baseline_requests: int = 0         # the colour it is compared with: when it fails, nothing is compared
    baseline_errors: int = 0


def estimates(windows: Windows) -> dict[str, dict[Point, Estimate]]:
    out: dict[str, dict[Point, Estimate]] = {}
    for family, points in windows.items():
        for point, rows in points.items():
            estimate = jackknife(rows)
            if estimate is not None:
                out.setdefault(family, {})[point] = estimate
    return out


def _check_row(r) -> GateRow:
    c: Check = r.check
    where = "all points" if c.kind == "contract" else c.name.split(" @ ", 1)[1]
    method = f"jackknife over {r.estimate.windows}+ paired windows, t({r.estimate.df:.0f})" if r.estimate else ""
    return GateRow(where, 0, f"{c.family}_mean", f"paired {c.kind}", None, None,
                   r.estimate.ratio if r.estimate else None, f"<= {c.margin:g}", r.verdict or Verdict.INCONCLUSIVE,
                   r.reason, critical=True, ci=(r.lower, r.upper) if r.estimate else None, method=method)


def _health_rows(health: Mapping[Point, PointHealth], gate: GateSpec) -> list[GateRow]:
    rows = []
    for (scenario, concurrency), h in sorted(health.items()):
        rate = h.errors / h.requests if h.requests else 1.0
        failed = rate > gate.max_error_rate
        rows.append(GateRow(scenario, concurrency, "error_rate", "errors", rate, None, None,
                            f"<= {gate.max_error_rate:.2%}", Verdict.FAIL if failed else Verdict.PASS,
                            f"{h.errors} of {h.requests} requests failed" + (
                                f", above the ceiling of {gate.max_error_rate:.2%}" if failed else ""),
                            critical=True))
        if h.baseline_requests and h.baseline_errors / h.baseline_requests > gate.max_error_rate:
            rows.append(GateRow(scenario, concurrency, "error_rate", "baseline errors",
                                h.baseline_errors / h.baseline_requests, None, None,
                                f"<= {gate.max_error_rate:.2%}", Verdict.INCONCLUSIVE,
                                f"the baseline failed {h.baseline_errors} of {h.baseline_requests} requests: the "
                                "colours cannot be compared (is the live colour or baseline.endpoint healthy?)",
                                critical=True))
        if h.saturation:
            rows.append(GateRow(scenario, concurrency, "client", "client", None, None, None, "not saturated",
                                Verdict.INCONCLUSIVE, f"the load client saturated ({h.saturation}): its "
                                                      "latencies measure the client", critical=True))
    return rows


def slo_rows(summaries: Sequence[ScenarioSummary], gate: GateSpec, seed: int = 0,
             probes: Probes = Probes()) -> list[GateRow]:
    """The candidate's SLO checks, as the unpaired gate makes them (``gate.evaluate_gate``)."""
    if not summaries or not any((gate.slo.ttft_ms, gate.slo.tpot_ms, gate.slo.e2e_ms)):
        return []
    # model_copy skips validation: a gate without rules judges the SLOs, errors and samples only.
    report = evaluate_gate(summaries, None, gate.model_copy(update={"rules": []}), seed=seed, probes=probes)
    return [r for r in report.rows if r.check == "slo"]


def probe_rows(summaries: Sequence[ScenarioSummary], probes: Probes) -> tuple[list[GateRow], set[Point]]:
    """Each probe point's transfer check, and the points whose transfers were not shown."""
    rows, blocked = [], set()
    for s in sorted(summaries, key=lambda s: (s.scenario, s.concurrency)):
        if s.scenario not in probes:
            continue
        rows.append(transfer_row(s, probes))
        if rows[-1].verdict is not Verdict.PASS:
            blocked.add((s.scenario, s.concurrency))
    return rows, blocked


def _where(row: GateRow) -> str:
    return row.reason if row.check.startswith("paired") else f"{row.scenario} @ concurrency {row.concurrency}: {row.reason}"


def verdict(checks: Sequence[Check], windows: Windows, health: Mapping[Point, PointHealth], levels: Levels, k: int,
            gate: GateSpec, stops: Sequence[PointStop] = (), baseline_source: str | None = None,
            summaries: Sequence[ScenarioSummary] = (), probes: Probes = Probes()
            ) -> tuple[Verdict | None, GateReport, LookResult]:
    """The gate at look k (1-based): its outcome (None: go on measuring), the report, the look;
    ``summaries``: the candidate's points so far, for its SLO checks and its probes' transfers."""
    transfers, blocked = probe_rows(summaries, probes)
    judged = {family: {p: w for p, w in points.items() if p not in blocked} for family, points in windows.items()}
    result = look(checks, estimates(judged), levels, k)
    rows = ([_check_row(r) for r in result.results] + _health_rows(health, gate) + transfers
            + slo_rows(summaries, gate, probes=probes))
    final = k >= len(levels.passing)
    gated = [r for r in rows if r.gated]      # a probe's TPOT SLO is shown, not gated
    fails = [r for r in gated if r.verdict is Verdict.FAIL]
    open_rows = [r for r in gated if r.verdict is not Verdict.PASS]
    if fails:
        outcome, reasons = Verdict.FAIL, tuple(_where(r) for r in fails)
    elif not open_rows:
        outcome, reasons = Verdict.PASS, (f"all {len(result.results)} paired checks within their margins at look "
                                          f"{k} of {len(levels.passing)}",)
    else:
        outcome = Verdict.INCONCLUSIVE if final else None
        reasons = tuple(_where(r) for r in open_rows) + (
            (f"undecided at the last look ({k} of {len(levels.passing)}): the budget is spent",) if final else ())
    report = GateReport(outcome or Verdict.INCONCLUSIVE, reasons, tuple(rows), gate.confidence, gate.min_samples,
                        gate.max_error_rate, baseline_source, None, len(checks), tuple(stops))
    return outcome, report, result


def windows_markdown(windows: Windows, result: LookResult, levels: Levels, window_s: Mapping[Point, float],
                     outcome: Verdict) -> list[str]:
    """Per point its windows and each family's ratio with its jackknife standard error; per check
    its interval at the look it stopped at; and the stop."""
    est = estimates(windows)
    points = sorted({p for per in windows.values() for p in per})
    k, looks = result.look, len(levels.passing)
    lines = ["## Paired windows", "",
             "Both colours served one request stream at once; each point's time was split into windows, and "
             "each family's ratio (candidate / baseline, of the windows' pooled means) has its standard error "
             "from the jackknife over those windows (each left out in turn), so drift both colours shared cancels.",
             "", "| point | windows | window | requests (candidate / baseline) | TTFT ratio ± SE | TPOT ratio ± SE |",
             "|---|---|---|---|---|---|"]
    for point in points:
        rows = windows.get("ttft", {}).get(point, ())
        n_c, n_b = sum(w.candidate_n for w in rows), sum(w.baseline_n for w in rows)

        def cell(family: str) -> str:
            e = est.get(family, {}).get(point)
            return "—" if e is None else f"{e.ratio:.3f} ± {e.se:.3f} (log)"
        lines.append(f"| {point[0]} @ {point[1]} | {len(rows)} | {window_s.get(point, 0.0):.0f} s | {n_c} / {n_b} | "
                     f"{cell('ttft')} | {cell('tpot')} |")
    lines += ["", "| check | margin | ratio | jackknife interval | verdict |", "|---|---|---|---|---|"]
    for r in result.results:
        interval = "—" if r.lower is None else f"[{fmt(r.lower)}, {fmt(r.upper)}]"
        ratio = "—" if r.estimate is None else fmt(r.estimate.ratio)
        lines.append(f"| {r.check.name} ({r.check.kind}) | {r.check.margin:g} | {ratio} | {interval} | "
                     f"{r.verdict.value if r.verdict else 'undecided'} |")
    stop = {Verdict.PASS: "every check PASSed", Verdict.FAIL: "a check FAILed",
            Verdict.INCONCLUSIVE: "undecided at the last look"}[outcome]
    lines += ["", f"Stopped at look {k} of {looks}: {stop}. Levels at that look: PASS one-sided "
                  f"{levels.passing[k - 1]:.3g}, FAIL {levels.failing[k - 1]:.3g} (α split over "
                  f"{len(result.results)} checks). The rules are in tasks/planning/gate_paired.py.", ""]
    return lines
