"""`pdlift launch BLUEPRINT`: stage 2 from the terminal."""

from __future__ import annotations

import argparse

from cli.common import stage_command


def _flow():
    from flows.launch import launch_flow

    return launch_flow


def register(sub: argparse._SubParsersAction, handlers: dict) -> None:
    stage_command(sub, handlers, "launch", "stage 2: launch, join EKS, label by topology", _flow)
