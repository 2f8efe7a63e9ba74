"""What the stage commands share: the --run-id option, how a stage's record is printed, and the check
that a Prefect API answers before a flow runs (``cli/server.py``)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

from blueprints.loader import load_blueprint
from cli.server import ensure_api
from tasks.planning import records
from tasks.runs import run_id_of


def add_run_id(p: argparse.ArgumentParser, help_text: str | None = None) -> None:
    p.add_argument("--run-id", default=None,
                   help=help_text or "resume or address this run (default: derived from the blueprint, so a re-run "
                                     "adopts)")


def resolve_run_id(blueprint_path: str, run_id: str | None) -> str:
    """The run a command works on; reads the blueprint first, so bad input fails before any flow starts."""
    return run_id_of(load_blueprint(blueprint_path), run_id)


def before_flow(blueprint_path: str | None = None, to_release: bool = False) -> None:
    """What every command that runs a flow does first: read the blueprint (bad input: exit 2;
    ``to_release``: as teardown reads it), then make sure a Prefect API answers (none: one line,
    exit 1), before any flow code runs."""
    if blueprint_path is not None:
        load_blueprint(blueprint_path, to_release=to_release)
    ensure_api()


def print_record(run_id: str, record: object) -> None:
    print(json.dumps({"run_id": run_id, **records.to_dict(record)}, indent=2))


def stage_command(sub: argparse._SubParsersAction, handlers: dict, name: str, help_text: str,
                  stage_flow: Callable[[], Callable[[str, str], object]]) -> argparse.ArgumentParser:
    """`pdlift NAME BLUEPRINT [--run-id R]`: run a stage's flow and print the record it made.
    ``stage_flow`` returns the flow (imported when the command runs: `pdlift --help` stays fast)."""
    p = sub.add_parser(name, help=help_text)
    p.add_argument("blueprint")
    add_run_id(p)

    def run(args: argparse.Namespace) -> int:
        run_id = resolve_run_id(args.blueprint, args.run_id)
        flow = stage_flow()
        ensure_api()
        print_record(run_id, flow(args.blueprint, run_id))
        return 0

    handlers[name] = run
    return p
