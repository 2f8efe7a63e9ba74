"""EC2 ``Filters=[{"Name": ..., "Values": [...]}]`` matching and NextToken paging."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Sequence
from typing import Any

from sandbox.aws.render import Ec2Error


def matches(filters: Sequence[dict[str, Any]], fields: Callable[[str], list[str] | None],
            tags: list[dict[str, str]]) -> bool:
    """True when every filter matches: values OR-ed, filters AND-ed, ``*`` and ``?`` wildcards.

    ``fields(name)`` returns the resource's values for a filter name, or None when the name is
    not a filter this resource supports (EC2 answers that with InvalidParameterValue).
    """
    for flt in filters:
        name = flt.get("Name", "")
        wanted = [str(v) for v in flt.get("Values", [])]
        if name.startswith("tag:"):
            key = name[4:]
            have = [t["Value"] for t in tags if t["Key"] == key]
        elif name == "tag-key":
            have = [t["Key"] for t in tags]
        elif name == "tag-value":
            have = [t["Value"] for t in tags]
        else:
            found = fields(name)
            if found is None:
                raise Ec2Error("InvalidParameterValue", f"The filter '{name}' is invalid")
            have = found
        if not any(fnmatch.fnmatchcase(h, w) for h in have for w in wanted):
            return False
    return True


def tags_for(tag_specs: Sequence[dict[str, Any]], resource_type: str) -> list[dict[str, str]]:
    """The tags of ``TagSpecifications`` entries for ``resource_type``."""
    tags: list[dict[str, str]] = []
    for spec in tag_specs or []:
        if spec.get("ResourceType") == resource_type:
            tags.extend({"Key": t["Key"], "Value": t.get("Value", "")}
                        for t in spec.get("Tags", []))
    return tags


def page(items: list[Any], next_token: str | None, max_results: int | None,
         default: int, largest: int) -> tuple[list[Any], str | None]:
    """One page of ``items`` and the NextToken for the rest (an offset, opaque to clients)."""
    size = default if max_results is None else max_results
    if not 1 <= size <= largest:
        raise Ec2Error("InvalidParameterValue", f"MaxResults must be between 1 and {largest}")
    try:
        start = int(next_token) if next_token else 0
    except ValueError:
        raise Ec2Error("InvalidParameterValue", "The NextToken is not valid") from None
    end = start + size
    return items[start:end], (str(end) if end < len(items) else None)
