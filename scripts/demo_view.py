"""What `scripts/demo` prints while a run goes: one line per stage, from the run's subflow runs
and their Prefect progress artifacts. Pure: it formats what the REST API answered."""

from __future__ import annotations

import datetime as dt

# The stage flows' Prefect names (flows/*.py) -> the stage names the rest of pdlift uses.
STAGES = {"reserve-capacity": "reserve", "launch-nodes": "launch", "validate-fabric": "fabric",
          "stage-weights": "weights", "deploy": "deploy", "benchmark-gate": "benchmark+gate"}
TERMINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}


def stage_name(flow_name: str) -> str:
    return STAGES.get(flow_name, flow_name)


def seconds(run: dict, now: dt.datetime) -> float:
    """How long a flow run has run (to its end, or to ``now``); 0 before it starts."""
    start = _time(run.get("start_time"))
    if start is None:
        return 0.0
    end = _time(run.get("end_time")) if run.get("state_type") in TERMINAL else None
    return max(0.0, ((end or now) - start).total_seconds())


def progress(artifacts: list[dict]) -> float | None:
    """A stage's progress in percent from its progress artifacts: the one that sums the stage up
    (a key ending in ``-total``) when there is one, else the least advanced (the stage is as far
    as its slowest part); None without any."""
    values = [(a.get("key") or "", float(a["data"])) for a in artifacts
              if a.get("type") == "progress" and isinstance(a.get("data"), (int, float))]
    if not values:
        return None
    totals = [v for key, v in values if key.endswith("-total")]
    return min(100.0, max(0.0, totals[0] if totals else min(v for _, v in values)))


def line(run: dict, pct: float | None, now: dt.datetime, width: int = 15) -> str:
    state = (run.get("state_name") or run.get("state_type") or "").lower()
    shown = f"  {pct:5.1f}%" if pct is not None else ""  # as the artifact says: a stage that ends short shows it
    return f"  {stage_name(run.get('flow_name') or run.get('name', '')):<{width}} {seconds(run, now):7.1f} s  {state}{shown}"


def _time(text: str | None) -> dt.datetime | None:
    if not text:
        return None
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
