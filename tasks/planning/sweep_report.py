"""The leak sweep's result and its report table, from what the sweep found (pure).

``tasks.teardown.sweep`` returns the tagged EC2 resources it judged stale; ``sweep_candidates``
returns one row per candidate colour of each blueprint checked. A candidate that is not kept is a
leak like any other (listed as stale); one that is kept stays a row of its own with the reason.
"""

from __future__ import annotations

NOTHING_STALE = {"kind": "-", "id": "nothing stale"}


def with_candidates(result: dict, candidates: list[dict]) -> dict:
    """The sweep's result with the candidate rows added, and each one not kept among the stale."""
    return {**result, "candidates": candidates,
            "stale": result["stale"] + [row for row in candidates if row["action"] != "kept"]}


def table(result: dict) -> list[dict]:
    """One row per stale resource, then one per candidate kept (its action says why); a single
    row saying so when there is nothing."""
    rows = [{"kind": f["kind"], "id": f["resource_id"], "deployment": f["deployment"], "run": f["run_id"],
             "created": f["created_at"], "ttl_h": f["ttl_hours"], "action": f["action"]} for f in result["stale"]]
    rows += [{"kind": c["kind"], "id": c["resource_id"], "deployment": c["deployment"], "run": "", "created": "",
              "ttl_h": "", "action": f"kept: {c['why']}"} for c in result["candidates"] if c["action"] == "kept"]
    return rows or [NOTHING_STALE]
