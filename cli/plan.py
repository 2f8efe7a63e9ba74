"""`pdlift validate BLUEPRINT`, `pdlift plan BLUEPRINT [--json]` and `pdlift plan-flow BLUEPRINT`: touch nothing."""

from __future__ import annotations

import argparse
import json


def _cmd_validate(args: argparse.Namespace) -> int:
    import sys

    from blueprints.loader import load_blueprint
    from tasks.planning.gate import describe_rules
    from tasks.planning.gate_sizing import size_gate
    from tasks.planning.plan import gate_warnings

    bp = load_blueprint(args.blueprint)
    undecidable = gate_warnings(size_gate(bp), bp.gate.allow_undecidable)
    if undecidable and not bp.gate.allow_undecidable:
        print(f"{args.blueprint}: gate: its rules cannot be decided within the benchmark's load "
              "(`pdlift plan` shows the figures); widen the rules, give the points more load, make the "
              "rule report_only, or set gate.allow_undecidable: true to accept it:\n"
              + "\n".join(f"  - {line}" for line in undecidable), file=sys.stderr)
        return 2
    print(f"{args.blueprint}: ok ({bp.name}: {bp.node_count} x {bp.aws.instance_type}, "
          f"{bp.engine.name} + {bp.kv_transfer.connector} over {bp.kv_transfer.protocol})")
    print("gate:\n" + "\n".join(f"  - {line}" for line in describe_rules(bp.gate)))
    for line in undecidable:
        print(f"warning: {line}")
    return 0


def _cmd_plan(args: argparse.Namespace) -> int:
    from blueprints.loader import load_blueprint
    from tasks.planning.plan import make_plan
    from tasks.planning.plan_render import render

    bp = load_blueprint(args.blueprint)
    if args.suggest_gate:
        return _suggest_gate(bp, args.blueprint)
    plan = make_plan(bp)
    if args.json:
        print(json.dumps(plan.to_dict(), indent=2, sort_keys=True))
    else:
        print(render(plan), end="")
    return 0


def _suggest_gate(bp, path: str) -> int:
    import sys

    from tasks.planning.gate_suggest import suggest_gate

    try:
        suggestion = suggest_gate(bp)
    except ValueError as e:
        print(f"{path}: cannot suggest a gate: {e}", file=sys.stderr)
        return 2
    budget = "" if suggestion.budget_minutes is None else (
        f", within benchmark.budget_minutes = {suggestion.budget_minutes:g}" if suggestion.fits
        else f", MORE than benchmark.budget_minutes = {suggestion.budget_minutes:g}")
    print(f"The cheapest paired gate that decides for {bp.name} (projected from the published figures and their "
          f"stated spread, 90% power for the whole gate): {suggestion.minutes:.1f} min of load{budget}.")
    print("\n".join(f"- {line}" for line in suggestion.why))
    print("\n" + suggestion.yaml(), end="")
    print(f"\nThe projection leaves out drift, time blocks and the looks' cost: measure it with "
          f"scripts/bench/gate_sim.py --paths paired --blueprint <the blueprint with these values>.")
    return 0


def _cmd_plan_flow(args: argparse.Namespace) -> int:
    from cli.common import before_flow
    from flows.plan import plan_flow

    before_flow(args.blueprint)
    plan_flow(args.blueprint)
    return 0


def register(sub: argparse._SubParsersAction, handlers: dict) -> None:
    p = sub.add_parser("validate", help="check a blueprint and report every problem with its line")
    p.add_argument("blueprint")
    handlers["validate"] = _cmd_validate

    p = sub.add_parser("plan", help="memory fit, KV capacity, cost and warnings; touches nothing")
    p.add_argument("blueprint")
    p.add_argument("--json", action="store_true", help="stable machine-readable output")
    p.add_argument("--suggest-gate", action="store_true",
                   help="print the cheapest paired gate that decides for this blueprint (points' load, weights)")
    handlers["plan"] = _cmd_plan

    p = sub.add_parser("plan-flow", help="run the plan as a Prefect flow run (markdown artifact)")
    p.add_argument("blueprint")
    handlers["plan-flow"] = _cmd_plan_flow
