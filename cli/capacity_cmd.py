"""`pdlift reserve|launch|teardown|sweep|iam-policy`: stages 1-2 and cleanup from the terminal."""

from __future__ import annotations

import argparse
import json


def _run_id(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run-id", default=None,
                   help="resume or address this run (default: derived from the blueprint, so a re-run adopts)")


def _cmd_reserve(args) -> int:
    from flows.reserve_capacity import reserve_capacity_flow

    print(json.dumps(reserve_capacity_flow(args.blueprint, args.run_id), indent=2))
    return 0


def _cmd_launch(args) -> int:
    from flows.launch_nodes import launch_nodes_flow

    print(json.dumps(launch_nodes_flow(args.blueprint, args.run_id), indent=2))
    return 0


def _cmd_teardown(args) -> int:
    from flows.teardown import teardown_flow

    for line in teardown_flow(args.blueprint, args.run_id):
        print(line)
    return 0


def _cmd_sweep(args) -> int:
    from flows.sweep import sweep_flow

    result = sweep_flow(args.region, args.apply, args.active_run)
    verb = "released" if args.apply else "would release (dry run; --apply to release)"
    for f in result["stale"]:
        print(f"{verb}: {f['kind']} {f['resource_id']} deployment={f['deployment']} run={f['run_id']} "
              f"created={f['created_at']} ttl={f['ttl_hours']}h")
    if not result["stale"]:
        print("nothing stale")
    return 0


def _cmd_iam(args) -> int:
    from tasks.planning.iam import render

    print(render())
    return 0


def register(sub: argparse._SubParsersAction, handlers: dict) -> None:
    for name, fn, text in (("reserve", _cmd_reserve, "stage 1: reserve capacity (adopts what this run made)"),
                           ("launch", _cmd_launch, "stage 2: launch, join EKS, label by topology"),
                           ("teardown", _cmd_teardown, "release everything tagged with the deployment")):
        p = sub.add_parser(name, help=text)
        p.add_argument("blueprint")
        _run_id(p)
        handlers[name] = fn
    p = sub.add_parser("sweep", help="list (or --apply: release) pdlift resources past TTL or of no active run")
    p.add_argument("--region", default="us-east-2")
    p.add_argument("--apply", action="store_true")
    p.add_argument("--active-run", action="append", default=[], help="a run id that is still active")
    handlers["sweep"] = _cmd_sweep
    p = sub.add_parser("iam-policy", help="print the least-privilege IAM policy pdlift needs")
    handlers["iam-policy"] = _cmd_iam
