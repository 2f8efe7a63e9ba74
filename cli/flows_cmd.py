"""Subcommands that run a Prefect flow: `pdlift plan-flow` (the plan as a Prefect artifact)."""

from __future__ import annotations

import argparse


def _cmd_plan_flow(args: argparse.Namespace) -> int:
    from flows.plan import plan_flow

    plan_flow(args.blueprint)
    return 0


def register(sub: argparse._SubParsersAction, handlers: dict) -> None:
    p = sub.add_parser("plan-flow", help="run the plan as a Prefect flow run (markdown artifact)")
    p.add_argument("blueprint")
    handlers["plan-flow"] = _cmd_plan_flow
