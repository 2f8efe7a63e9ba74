"""The `pdlift` command line. Each subcommand is a thin layer over planning or a flow.

Exit codes: 0 success, 1 a stage failed or was refused (message on stderr), 2 bad input
(blueprint or arguments). Errors pdlift understands print one clear message, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence

from tasks.errors import ConfigError, PdliftError

Handler = Callable[[argparse.Namespace], int]


def _cmd_validate(args: argparse.Namespace) -> int:
    from blueprints.loader import load_blueprint

    bp = load_blueprint(args.blueprint)
    print(f"{args.blueprint}: ok ({bp.name}: {bp.node_count} x {bp.aws.instance_type}, "
          f"{bp.engine.name} + {bp.kv_transfer.connector} over {bp.kv_transfer.protocol})")
    return 0


def _cmd_plan(args: argparse.Namespace) -> int:
    from blueprints.loader import load_blueprint
    from tasks.planning.plan import make_plan
    from tasks.planning.plan_render import render

    plan = make_plan(load_blueprint(args.blueprint))
    if args.json:
        print(json.dumps(plan.to_dict(), indent=2, sort_keys=True))
    else:
        print(render(plan), end="")
    return 0


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, Handler]]:
    parser = argparse.ArgumentParser(
        prog="pdlift",
        description="Move a prefill/decode-disaggregated inference service onto AWS GPU capacity.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    handlers: dict[str, Handler] = {}

    p = sub.add_parser("validate", help="check a blueprint and report every problem with its line")
    p.add_argument("blueprint")
    handlers["validate"] = _cmd_validate

    p = sub.add_parser("plan", help="memory fit, KV capacity, cost and warnings; touches nothing")
    p.add_argument("blueprint")
    p.add_argument("--json", action="store_true", help="stable machine-readable output")
    handlers["plan"] = _cmd_plan

    for register in _extra_commands():
        register(sub, handlers)
    return parser, handlers


def _extra_commands() -> list[Callable[[argparse._SubParsersAction, dict[str, Handler]], None]]:
    """Stage commands live beside their flows; each module adds its own subcommands."""
    from cli import commands

    return commands.REGISTRARS


def main(argv: Sequence[str] | None = None) -> int:
    parser, handlers = build_parser()
    args = parser.parse_args(argv)
    try:
        return handlers[args.command](args)
    except ConfigError as e:
        print(f"pdlift {args.command}: {e}", file=sys.stderr)
        return 2
    except PdliftError as e:
        print(f"pdlift {args.command}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"pdlift {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
