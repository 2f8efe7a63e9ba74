"""The gate report for people: a markdown rationale, rows for a Prefect table artifact, and JSON."""

from __future__ import annotations

import math
from dataclasses import asdict

from tasks.planning.bench_judge import RATIO_RULE, Verdict, fmt
from tasks.planning.gate import GateReport, GateRow

_UNITS = {"output_tokens_per_s": "tok/s", "request_throughput": "req/s", "goodput": "req/s",
          "error_rate": "", "completed": "requests", "client": ""}


def _unit(metric: str) -> str:
    return _UNITS.get(metric, "ms")


def _value(row: GateRow) -> str:
    if row.candidate is None:
        return "—"
    if row.metric == "error_rate":
        return f"{row.candidate:.2%}"
    return f"{fmt(row.candidate)} {_unit(row.metric)}".strip()


def _test(row: GateRow) -> str:
    parts = []
    if row.p_value is not None:
        parts.append(f"p={row.p_value:.2g}" + (f" (Holm {row.p_adjusted:.2g})" if row.p_adjusted is not None else ""))
    if row.ci is not None:
        parts.append(f"CI [{fmt(row.ci[0])}, {fmt(row.ci[1])}]")
    if row.repeats:
        parts.append("repeats " + ", ".join(fmt(r) for r in row.repeats))
    return "; ".join(parts) or "—"


def _verdict(row: GateRow) -> str:
    if row.verdict is None:
        return "—"
    if not row.gated:
        return f"{row.verdict.value} (report only)"
    return f"{row.verdict.value}{' (critical)' if row.critical and row.verdict is Verdict.FAIL else ''}"


def rows_for_table(report: GateReport, scenario: str | None = None) -> list[dict]:
    """One dict per check, values as display strings (JSON-safe, no NaN or infinity)."""
    return [
        {"scenario": r.scenario, "concurrency": r.concurrency, "metric": r.metric,
         "candidate": _value(r),
         "baseline": "—" if r.baseline is None else f"{fmt(r.baseline)} {_unit(r.metric)}".strip(),
         "ratio": fmt(r.ratio), "bound": r.bound, "test": _test(r), "verdict": _verdict(r), "reason": r.reason}
        for r in report.rows if scenario is None or r.scenario == scenario
    ]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(report: GateReport) -> str:
    """The rationale: outcome, why, settings, then one table per scenario and concurrency."""
    lines = [f"# Promotion gate: {report.outcome.value}", ""]
    lines += ["**Why:**", ""] + [f"- {_cell(reason)}" for reason in report.reasons] + [""]
    baseline = report.baseline_source or "none"
    if report.baseline_run_id:
        baseline += f" (run {report.baseline_run_id})"
    lines += [f"Settings: confidence {report.confidence:.0%}, at least {report.min_samples} independent blocks "
              f"(of as many consecutive requests as the concurrency) per point, error ceiling {report.max_error_rate:.2%}. Baseline: {_cell(baseline)}.", ""]
    columns = ("metric", "candidate", "baseline", "ratio", "bound", "test", "verdict", "reason")
    for scenario in report.scenarios:
        lines += [f"## {scenario}", ""]
        table = rows_for_table(report, scenario)
        for concurrency in dict.fromkeys(t["concurrency"] for t in table):
            lines += [f"### concurrency {concurrency}", "",
                      "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
            lines += ["| " + " | ".join(_cell(str(t[c])) for c in columns) + " |"
                      for t in table if t["concurrency"] == concurrency]
            lines.append("")
    return "\n".join(lines + _stops_markdown(report) + _how_to_read(report))


def _how_to_read(report: GateReport) -> list[str]:
    alpha = 1.0 - report.confidence
    lines = [
        "How to read this:",
        "",
        f"- Every test is one-sided at one level, α = {alpha:g}: a check FAILs only when its bound is "
        "broken with p < α; the CI column gives, at each end, a one-sided "
        f"{report.confidence:.0%} bound, so a FAIL's interval lies wholly beyond the bound.",
        "- Means and percentiles of latencies are tested with a bootstrap of that statistic's ratio to "
        "the baseline (to the SLO for SLO rows), resampling time blocks of as many consecutive requests as "
        "the concurrency (requests that shared batch steps move together; ITL gaps move with their "
        "request). Repeats drift more than requests within a run vary: where a side's repeats disagree "
        "more than its bootstrap allows, their spread is the noise instead (read with Student's t: a few repeats' spread is itself uncertain). Throughputs are tested over "
        "the repeats with a t test of their logs against the baseline's own repeats; a published figure "
        "counts with the variance of its sample count and stated CV; with no noise estimate on either "
        "side a figure stands as measured, as the error rate does.",
        f"- The {report.critical_tests} critical checks with a p-value are one family: their p-values are "
        "Holm-adjusted (shown as \"Holm\"), so an equal candidate FAILs on any of them with a chance of at "
        "most α. Non-critical checks are tested alone; their FAIL makes the gate INCONCLUSIVE, not FAIL.",
        f"- {RATIO_RULE} An SLO is read the same way, in milliseconds. So a candidate as bad as "
        "the bound PASSes at most α of the time. A point estimate within the bound with a wider "
        "interval is not enough: too few samples to tell is INCONCLUSIVE, as is a point that is not "
        "trustworthy (too few requests, a saturated client); a person decides. The rules are in "
        "tasks/planning/gate.py.",
        ""]
    if report.stops and any(st.reason != "budget" for st in report.stops):
        lines[-1:-1] = [
            "- This benchmark was sequential: each point ran in rounds and was judged after each, at the "
            "share of α its look may spend (α·(k/K)^ρ minus what earlier looks spent; the critical checks "
            f"split it over all {report.critical_tests} the benchmark could make), so however often it "
            "looked, an equal candidate FAILs, or one as bad as the margin PASSes, with a chance of at most "
            "α. A point stopped once every check on it was decided; a critical FAIL stopped the benchmark. "
            "The rules are in tasks/planning/gate_sequential.py."]
    return lines


def _interval_at_stop(report: GateReport, scenario: str, concurrency: int) -> str:
    shown = [f"{r.metric} [{fmt(r.ci[0])}, {fmt(r.ci[1])}]" for r in report.rows
             if (r.scenario, r.concurrency) == (scenario, concurrency) and r.critical and r.ci is not None]
    return "; ".join(shown) or "—"


def _stops_markdown(report: GateReport) -> list[str]:
    """Per point: the rounds it took, its load, why it stopped, and its critical intervals then."""
    if not report.stops:
        return []
    lines = ["## How the decision was reached", "",
             "| scenario | concurrency | rounds | load | stopped | α at the last look | intervals at the stop |",
             "|---|---|---|---|---|---|---|"]
    for st in report.stops:
        lines.append(f"| {st.scenario} | {st.concurrency} | {st.rounds} | {st.load_s:.0f} s | {_cell(st.note)} | "
                     f"{st.alpha:.2g} | {_cell(_interval_at_stop(report, st.scenario, st.concurrency))} |")
    total = sum(st.load_s for st in report.stops)
    return lines + ["", f"Load in all: {total / 60:.1f} min.", ""]


def _json_safe(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Verdict):
        return value.value
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    return value


def report_to_dict(report: GateReport) -> dict:
    """The report as plain JSON data (infinite ratios become null)."""
    return _json_safe(asdict(report))
