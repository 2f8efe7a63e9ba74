"""`pdlift reserve BLUEPRINT`: stage 1 from the terminal (adopts what this run already made)."""

from __future__ import annotations

import argparse

from cli.common import stage_command


def _flow():
    from flows.reserve import reserve_flow

    return reserve_flow


def register(sub: argparse._SubParsersAction, handlers: dict) -> None:
    stage_command(sub, handlers, "reserve", "stage 1: reserve capacity (adopts what this run made)", _flow)
