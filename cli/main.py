"""The `pdlift` command line. Each subcommand is a thin layer over planning or a flow (``cli/<stage>.py``).

Exit codes: 0 success, 1 a stage failed or was refused (message on stderr), 2 bad input
(blueprint or arguments). Errors pdlift understands print one clear message, never a traceback;
among them, no Prefect API to run a flow against (``cli/server.py``): one line naming the fix.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from cli import commands, server
from tasks.errors import ConfigError, PdliftError

Handler = Callable[[argparse.Namespace], int]


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, Handler]]:
    parser = argparse.ArgumentParser(
        prog="pdlift",
        description="Move a prefill/decode-disaggregated inference service onto AWS GPU capacity.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    handlers: dict[str, Handler] = {}
    for register in commands.REGISTRARS:
        register(sub, handlers)
    return parser, handlers


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
    except Exception as e:
        line = server.explain(e)  # the Prefect API unreachable, or its temporary server not started
        if line is None:
            raise
        print(f"pdlift {args.command}: {line}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
