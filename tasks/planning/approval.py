"""What a run may spend without a person saying yes. Pure."""

from __future__ import annotations

from blueprints.schema import Blueprint
from tasks.errors import ConfigError


def check_capacity_block_approval(bp: Blueprint, approved: bool) -> None:
    """A Capacity Block is paid upfront and cannot be cancelled: buying one needs an explicit yes."""
    if bp.aws.capacity.mode == "capacity-block" and not approved:
        raise ConfigError("the blueprint buys a Capacity Block (paid upfront, cannot be cancelled); "
                          "start the run with approve_capacity_block_purchase = true to allow it")
