"""The gate report for people: a markdown rationale, rows for a Prefect table artifact, and JSON."""

from __future__ import annotations

import math
from dataclasses import asdict

from tasks.planning.bench_judge import Verdict, fmt
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
        parts.append(f"p={row.p_value:.2g}")
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
    lines += [f"Settings: confidence {report.confidence:.0%}, at least {report.min_samples} completed "
              f"requests per point, error ceiling {report.max_error_rate:.2%}. Baseline: {_cell(baseline)}.", ""]
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
    lines += ["How to read this: a ratio check FAILs only when its bound is broken significantly "
              "(Mann-Whitney U or a bootstrap interval at the stated confidence) and in most repeats; a "
              "break within noise PASSes only inside the margin. Critical failures fail the gate, other "
              "doubts make it INCONCLUSIVE for a person to decide. The rules are in tasks/planning/gate.py.", ""]
    return "\n".join(lines)


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
