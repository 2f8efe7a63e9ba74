"""`pdlift launch BLUEPRINT`: stage 2 from the terminal."""

from __future__ import annotations

import argparse

from cli.common import add_run_id, print_record, resolve_run_id


def _cmd_launch(args: argparse.Namespace) -> int:
    from flows.launch import launch_flow

    run_id = resolve_run_id(args.blueprint, args.run_id)
    print_record(run_id, launch_flow(args.blueprint, run_id))
    return 0


def register(sub: argparse._SubParsersAction, handlers: dict) -> None:
    p = sub.add_parser("launch", help="stage 2: launch, join EKS, label by topology")
    p.add_argument("blueprint")
    add_run_id(p)
    handlers["launch"] = _cmd_launch
