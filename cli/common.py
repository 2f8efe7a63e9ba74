"""What the stage commands share: the --run-id option and how a stage's record is printed."""

from __future__ import annotations

import argparse
import json

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
