"""`pdlift status BLUEPRINT [--json]`: the fleet, the live colour, the last gate, runs in flight,
what it costs now, and the teardown command. Reads only; needs no Prefect API."""

from __future__ import annotations

import argparse
import json


def _cmd_status(args: argparse.Namespace) -> int:
    from tasks import status as status_tasks
    from tasks.planning import status as view

    now = status_tasks.current(args.blueprint)
    print(json.dumps(view.to_dict(now), indent=2) if args.json else view.render_text(now))
    return 0


def register(sub: argparse._SubParsersAction, handlers: dict) -> None:
    p = sub.add_parser("status", help="what a deployment has running now, what it costs, and how to tear it down")
    p.add_argument("blueprint")
    p.add_argument("--json", action="store_true", help="the same as stable JSON, for scripts")
    handlers["status"] = _cmd_status
