"""What the stage commands share: the --run-id option and how a stage's record is printed."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

from blueprints.loader import load_blueprint
from tasks.planning import records
from tasks.runs import run_id_of


def add_run_id(p: argparse.ArgumentParser, help_text: str | None = None) -> None:
    p.add_argument("--run-id", default=None,
                   help=help_text or "resume or address this run (default: derived from the blueprint, so a re-run "
                                     "adopts)")


def resolve_run_id(blueprint_path: str, run_id: str | None) -> str:
    """The run a command works on; reads the blueprint first, so bad input fails before any flow starts."""
    return run_id_of(load_blueprint(blueprint_path), run_id)


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
        print_record(run_id, stage_flow()(args.blueprint, run_id))
        return 0

    handlers[name] = run
    return p
