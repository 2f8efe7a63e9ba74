"""`pdlift launch BLUEPRINT`: stage 2 from the terminal, with the instances running and joined as a
progress bar on stderr (``cli.progress``)."""

from __future__ import annotations

import argparse

from cli.common import stage_command
from cli.progress import progress_bar


def _flow():
    from flows.launch import launch_flow

    def launch_with_bar(blueprint_path: str, run_id: str):
        with progress_bar():
            return launch_flow(blueprint_path, run_id)

    return launch_with_bar


def register(sub: argparse._SubParsersAction, handlers: dict) -> None:
    stage_command(sub, handlers, "launch", "stage 2: launch, join EKS, label by topology", _flow)
