"""The plan flow: the same plan `pdlift plan` prints, as a markdown artifact on the run.

Run it ephemerally with ``python -m flows.plan BLUEPRINT``.
"""

from __future__ import annotations

import sys

from prefect import flow

from tasks import plan as plan_tasks
from tasks.planning.plan import Plan


@flow(name="plan", log_prints=True)
def plan_flow(blueprint_path: str) -> Plan:
    blueprint = plan_tasks.load(blueprint_path)
    the_plan = plan_tasks.plan(blueprint)
    plan_tasks.publish_plan(the_plan)
    return the_plan


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m flows.plan BLUEPRINT")
    plan_flow(sys.argv[1])
