"""Placement groups: CreatePlacementGroup / DescribePlacementGroups / DeletePlacementGroup.

moto has no placement groups (it answers HTTP 500), so they live here, with EC2's error codes:
``InvalidPlacementGroup.Duplicate``, ``.Unknown`` and ``.InUse`` (while instances run in it).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sandbox.aws.filters import matches, tags_for
from sandbox.aws.render import Ec2Error

STRATEGIES = ("cluster", "spread", "partition")


@dataclass
class PlacementGroup:
    name: str
    region: str
    account_id: str
    strategy: str
    group_id: str = field(default_factory=lambda: "pg-" + secrets.token_hex(9)[:17])
    partition_count: int | None = None
    spread_level: str | None = None
    tags: list[dict[str, str]] = field(default_factory=list)

    @property
    def arn(self) -> str:
        return f"arn:aws:ec2:{self.region}:{self.account_id}:placement-group/{self.name}"

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "GroupName": self.name,
            "State": "available",
            "Strategy": self.strategy,
            "GroupId": self.group_id,
            "Tags": self.tags,
            "GroupArn": self.arn,
        }
        if self.partition_count is not None:
            out["PartitionCount"] = self.partition_count
        if self.spread_level is not None:
            out["SpreadLevel"] = self.spread_level
        return out


class PlacementGroups:
    """All placement groups, keyed by (region, name). ``in_use(region, name)`` comes from the
    instance registry, so DeletePlacementGroup sees the instances still running in a group."""

    def __init__(self, account_id: str, in_use: Callable[[str, str], bool]) -> None:
        self._account_id = account_id
        self._in_use = in_use
        self._groups: dict[tuple[str, str], PlacementGroup] = {}

    def get(self, region: str, name: str) -> PlacementGroup | None:
        return self._groups.get((region, name))

    def by_arn(self, arn: str) -> PlacementGroup | None:
        return next((g for g in self._groups.values() if g.arn == arn), None)

    def create(self, region: str, params: dict[str, Any]) -> dict[str, Any]:
        name = params.get("GroupName")
        if not name:
            raise Ec2Error("MissingParameter", "The request must contain the parameter GroupName")
        strategy = params.get("Strategy", "cluster")
        if strategy not in STRATEGIES:
            raise Ec2Error("InvalidParameterValue", f"Invalid placement strategy: {strategy}")
        if (region, name) in self._groups:
            raise Ec2Error(
                "InvalidPlacementGroup.Duplicate", f"The Placement Group '{name}' already exists."
            )
        group = PlacementGroup(
            name=name,
            region=region,
            account_id=self._account_id,
            strategy=strategy,
            partition_count=params.get("PartitionCount") if strategy == "partition" else None,
            spread_level=params.get("SpreadLevel") if strategy == "spread" else None,
            tags=tags_for(params.get("TagSpecifications", []), "placement-group"),
        )
        self._groups[(region, name)] = group
        return {"PlacementGroup": group.describe()}

    def describe(self, region: str, params: dict[str, Any]) -> dict[str, Any]:
        groups = [g for (r, _), g in self._groups.items() if r == region]
        for name in params.get("GroupNames", []):
            if (region, name) not in self._groups:
                raise Ec2Error(
                    "InvalidPlacementGroup.Unknown", f"The Placement Group '{name}' is unknown."
                )
        if params.get("GroupNames"):
            groups = [g for g in groups if g.name in params["GroupNames"]]
        if params.get("GroupIds"):
            groups = [g for g in groups if g.group_id in params["GroupIds"]]
        filters = params.get("Filters", [])
        chosen = [g for g in groups if matches(filters, _fields(g), g.tags)]
        return {"PlacementGroups": [g.describe() for g in chosen]}

    def delete(self, region: str, params: dict[str, Any]) -> dict[str, Any]:
        name = params["GroupName"]
        if (region, name) not in self._groups:
            raise Ec2Error(
                "InvalidPlacementGroup.Unknown", f"The Placement Group '{name}' is unknown."
            )
        if self._in_use(region, name):
            raise Ec2Error(
                "InvalidPlacementGroup.InUse",
                f"The placement group '{name}' is in use and may not be deleted.",
            )
        del self._groups[(region, name)]
        return {"Return": True}


def _fields(group: PlacementGroup) -> Callable[[str], list[str] | None]:
    values = {
        "group-name": [group.name],
        "group-arn": [group.arn],
        "state": ["available"],
        "strategy": [group.strategy],
        "spread-level": [group.spread_level] if group.spread_level else [],
    }
    return values.get
