"""The benchmark plot: mean TTFT and TPOT, and what the servers said, against concurrency, as PNG bytes.

matplotlib with the Agg backend, drawn into memory (no display, no temporary files, safe in a
worker without X). One colour per scenario; the candidate is a solid line with filled markers,
the baseline a dashed line with hollow markers (often a single published point per scenario).
A server-side figure (prefill queue, KV transfer, GPU utilisation...) gets a panel when the run
measured it.
"""

from __future__ import annotations

import io
from collections.abc import Iterable

from tasks.planning.bench_baseline import Baseline
from tasks.planning.metrics import ScenarioSummary, metric_value

PANELS = (("ttft_mean", "mean TTFT (ms)"), ("tpot_mean", "mean TPOT (ms)"))
SERVER_PANELS = (("prefill_queue_ms_mean", "mean prefill queue (ms)"), ("kv_transfer_ms_mean", "mean KV transfer (ms)"),
                 ("spec_acceptance", "spec. decoding acceptance"), ("prefill_gpu_util", "prefill GPU utilisation (%)"),
                 ("decode_gpu_util", "decode GPU utilisation (%)"))


def plot_png(summaries: Iterable[ScenarioSummary], baseline: Baseline | None, title: str) -> bytes:
    import matplotlib

    matplotlib.use("Agg", force=True)
    from matplotlib.figure import Figure  # the OO API: no pyplot global state between runs

    summaries = sorted(summaries, key=lambda s: (s.scenario, s.concurrency))
    scenarios = list(dict.fromkeys(s.scenario for s in summaries))
    panels = PANELS + tuple(p for p in SERVER_PANELS if any(metric_value(s, p[0]) is not None for s in summaries))
    columns = min(3, len(panels))
    rows = -(-len(panels) // columns)
    fig = Figure(figsize=(5 * columns, 4.0 * rows + 0.4), dpi=90)
    grid = fig.subplots(rows, columns, squeeze=False)
    axes = [ax for row in grid for ax in row]
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    palette = [f"C{i}" for i in range(10)]
    for ax, (metric, label) in zip(axes, panels):
        for i, scenario in enumerate(scenarios):
            colour = palette[i % len(palette)]
            points = [(s.concurrency, metric_value(s, metric)) for s in summaries if s.scenario == scenario]
            points = [(c, v) for c, v in points if v is not None]
            if points:
                ax.plot(*zip(*points), "-o", color=colour, label=f"{scenario} candidate")
            base = [(e.concurrency, e.figures[metric]) for e in (baseline.entries if baseline else ())
                    if e.scenario == scenario and metric in e.figures]
            if base:
                base.sort()
                ax.plot(*zip(*base), "--o", color=colour, markerfacecolor="none", label=f"{scenario} baseline")
        ax.set_xscale("log", base=2)
        ticks = sorted({s.concurrency for s in summaries} |
                       {e.concurrency for e in (baseline.entries if baseline else ())})
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.set_ylim(bottom=0)  # from zero: a 1% difference must look like one
        ax.set_xlabel("concurrency")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(4, max(1, len(labels))), fontsize=8, frameon=False)
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.1 / rows, 1, 1))  # room for the legend below the panels, off the data
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()
