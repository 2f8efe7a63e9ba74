"""Render a ``Plan`` for people: a terminal table, or markdown for the Prefect artifact."""

from __future__ import annotations

from tasks.planning.plan import Plan
from tasks.planning.timeline import duration


def _money(value: float | None) -> str:
    return "unknown" if value is None else f"${value:,.2f}"


def _table(headers: list[str], rows: list[list[str]], markdown: bool) -> list[str]:
    if markdown:
        out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
        return out + ["| " + " | ".join(r) + " |" for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return [line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows]


def _gate(plan: Plan, h, markdown: bool) -> list[str]:
    g = plan.gate
    if not g or not g["checks"]:
        notes = [f"- {n}" for n in (g or {}).get("notes", ())] or ["- no ratio checks to size"]
        return [h("Gate (projected)"), "", *notes, ""]
    def pct(v):
        return "—" if v is None else f"{v:.0%}"

    rows = []
    for c in g["checks"]:
        point = c["scenario"] if not c["concurrency"] else f"{c['scenario']} @ {c['concurrency']}"
        rows.append([point, c["metric"], f"{c['rule']:g}", str(c["requests"]),
                     f"{c['minutes']:.1f}", "—" if c["se"] is None else f"{c['se']:.3f}", pct(c["p_pass_equal"]),
                     pct(c["p_fail_twice"]), "—" if c["smallest_margin"] is None else f"{c['smallest_margin']:.3f}",
                     "—" if c["minutes_needed"] is None else ("never" if c["minutes_needed"] == "never"
                                                              else f"{c['minutes_needed']:.1f}"),
                     "yes" if c["decidable"] else "NO"])
    out = [h("Gate (projected)"), ""]
    out += _table(["point", "rule", "r", "requests", "cap min", "SE log", "P(PASS|equal)", "P(FAIL|2x)",
                   "certifiable", "min needed", "decides"], rows, markdown)
    whole = g["p_pass_equal"]
    out += ["", "P(PASS | equal) for the whole gate: " + ("— (a check cannot PASS)" if whole is None else f"{whole:.0%}")]
    if g["stated_cv"]:
        out.append("The CVs are stated in the blueprint (baseline.cv), not measured: a recorded baseline's are better.")
    return out + [f"- {n}" for n in g["notes"]] + [""]


def _timeline(plan: Plan, markdown: bool) -> list[str]:
    t = plan.timeline
    rows = []
    for s in t.stages:
        usd_e, usd_w = s.usd(t.usd_per_hour)
        rows.append([s.stage, duration(s.expected_s), duration(s.worst_s), _money(usd_e), _money(usd_w)])
    usd = (t.expected_s / 3600 * t.usd_per_hour, t.worst_s / 3600 * t.usd_per_hour) if t.usd_per_hour else (None, None)
    rows.append(["total", duration(t.expected_s), duration(t.worst_s), _money(usd[0]), _money(usd[1])])
    out = _table(["stage", "expected", "at most", "cost expected", "cost at most"], rows, markdown)
    out += ["", "How each figure was reached, and its source (docs/sources.md#plan-timeline):", ""]
    out += [f"- {s.stage}: {s.basis}. Source: {s.source}." for s in t.stages]
    return out


def render(plan: Plan, markdown: bool = False) -> str:
    h = (lambda t: f"### {t}") if markdown else (lambda t: f"{t}\n{'=' * len(t)}")
    out = [("## " if markdown else "") + f"pdlift plan: {plan.blueprint} ({plan.model})", ""]
    out += [f"Weights {plan.weights_gb:,.1f} GB; KV cache {plan.kv_bytes_per_token:,.0f} bytes/token; "
            f"{plan.gpus_per_node} GPUs x {plan.gpu_memory_gb:g} GB per node.", ""]
    out += [h("Memory fit per GPU"), ""]
    rows = [[r["role"], str(r["nodes"]), str(r["gpus"]), r["layout"], f"{r['weights_gb_per_gpu']:.1f}",
             f"{r['usable_gb_per_gpu']:.1f}", f"{r['kv_free_gb_per_gpu']:.1f}",
             f"{r['kv_token_capacity']:,}", "yes" if r["fits"] else "NO"] for r in plan.roles]
    out += _table(["role", "nodes", "GPUs", "layout", "weights GB", "usable GB", "KV free GB",
                   "KV tokens", "fits"], rows, markdown)
    out += ["", f"(usable = GPU memory x gpu_memory_utilization; {plan.roles[0]['runtime_reserve_gb_per_gpu']:g} GB "
                "per GPU held back for activations and buffers, an estimate)", ""]
    out += [h("Scenarios: KV capacity and transfer"), ""]
    rows = [[s.scenario, f"{s.context_tokens:,}", f"{s.kv_gb_per_request:.2f}", f"{s.kv_transfer_ms:.1f}",
             str(s.prefill_max_sequences), str(s.decode_max_sequences), str(s.max_target_concurrency)]
            for s in plan.scenarios]
    out += _table(["scenario", "context", "KV GB/request", "KV transfer ms", "prefill max seqs",
                   "decode max seqs", "target concurrency"], rows, markdown)
    out += ["", h("Timeline on AWS (projected)"), ""] + _timeline(plan, markdown)
    c = plan.cost
    out += ["", h("Cost"), "",
            f"{c.nodes} x {c.instance_type} at {_money(c.usd_per_node_hour)}/h each = {_money(c.usd_per_hour)}/h; "
            f"projected run {c.expected_hours:g} h = {_money(c.usd_per_run)}",
            f"price: {c.price_source} (as of {c.price_as_of}); capacity: {c.capacity_mode}: {c.note}", ""]
    u = plan.updates
    if u:
        out += [h("Updates (redeploy, rollout)"), "",
                f"strategy on this fleet: {u['strategy']} ({u['reason']})", u["recreate"],
                f"(recreate: {u['recreate_downtime']['basis']})", u["fleet"], ""]
    out += _gate(plan, h, markdown)
    out += [h("Will create"), ""] + [f"- {r}" for r in plan.resources] + [""]
    out += [h("Warnings"), ""] + ([f"- {w}" for w in plan.warnings] or ["- none"])
    return "\n".join(out) + "\n"
