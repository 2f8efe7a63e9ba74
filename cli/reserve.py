"""`pdlift reserve BLUEPRINT`: stage 1 from the terminal (adopts what this run already made)."""

from __future__ import annotations

import argparse

from cli.common import add_run_id, print_record, resolve_run_id


def _cmd_reserve(args: argparse.Namespace) -> int:
    from flows.reserve import reserve_flow

    run_id = resolve_run_id(args.blueprint, args.run_id)
    print_record(run_id, reserve_flow(args.blueprint, run_id))
    return 0


def register(sub: argparse._SubParsersAction, handlers: dict) -> None:
    p = sub.add_parser("reserve", help="stage 1: reserve capacity (adopts what this run made)")
    p.add_argument("blueprint")
    add_run_id(p)
    handlers["reserve"] = _cmd_reserve
