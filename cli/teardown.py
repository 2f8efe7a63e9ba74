"""`pdlift teardown BLUEPRINT` and `pdlift sweep`: release what pdlift made, by tag."""

from __future__ import annotations

import argparse

from cli.common import add_run_id, before_flow


def _cmd_teardown(args: argparse.Namespace) -> int:
    from flows.teardown import teardown_flow

    before_flow(args.blueprint, to_release=True)
    for line in teardown_flow(args.blueprint, args.run_id):
        print(line)
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    from flows.sweep import sweep_flow

    before_flow()
    result = sweep_flow(args.region, args.apply, args.active_run, args.blueprint)
    for f in result["stale"]:
        verb = f["action"] + ("" if args.apply else " (dry run; --apply to release)")
        if f["kind"] == "candidate-namespace":
            print(f"{verb}: namespace {f['resource_id']} deployment={f['deployment']}: {f['why']}")
            continue
        print(f"{verb}: {f['kind']} {f['resource_id']} deployment={f['deployment']} run={f['run_id']} "
              f"created={f['created_at']} ttl={f['ttl_hours']}h")
    for c in result.get("candidates", []):
        if c["action"] == "kept":
            print(f"kept: namespace {c['resource_id']} deployment={c['deployment']}: {c['why']}")
    if not result["stale"]:
        print("nothing stale")
    return 0


def register(sub: argparse._SubParsersAction, handlers: dict) -> None:
    p = sub.add_parser("teardown", help="release everything tagged with the deployment")
    p.add_argument("blueprint")
    add_run_id(p, "release only this run's resources (default: every run of the deployment)")
    handlers["teardown"] = _cmd_teardown
    p = sub.add_parser("sweep", help="list (or --apply: release) pdlift resources past TTL or of no active run")
    p.add_argument("--region", default="us-east-2")
    p.add_argument("--apply", action="store_true")
    p.add_argument("--active-run", action="append", default=[], help="a run id that is still active")
    p.add_argument("--blueprint", action="append", default=[],
                   help="also check this deployment's candidate colours that no run is left to decide on")
    handlers["sweep"] = _cmd_sweep
