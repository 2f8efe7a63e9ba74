"""Read EC2 Query protocol requests back into the dict boto3 was called with.

boto3 flattens ``run_instances(NetworkInterfaces=[{"DeviceIndex": 0}])`` into
``NetworkInterface.1.DeviceIndex=0``. This module inverts that, driven by botocore's own EC2
service model, so the handlers and the request log see exactly the shape pdlift passed to boto3
(member names, lists, integers, booleans, timestamps) without a hand-written table per call.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl

import botocore.session
from botocore.model import ServiceModel, Shape


@functools.lru_cache(maxsize=1)
def ec2_model() -> ServiceModel:
    return botocore.session.get_session().get_service_model("ec2")


def parse_form(body: bytes, query_string: str) -> dict[str, str]:
    """The flat key/value pairs of a Query request: URL query merged with a form body."""
    pairs = parse_qsl(query_string, keep_blank_values=True)
    if body:
        pairs += parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True)
    return dict(pairs)


def operation_names() -> frozenset[str]:
    return frozenset(ec2_model().operation_names)


def parse_params(action: str, flat: Mapping[str, str]) -> dict[str, Any]:
    """``flat`` (``Placement.GroupName=pg``) -> ``{"Placement": {"GroupName": "pg"}}``.

    Unknown keys are ignored, as EC2 ignores nothing but botocore never sends them anyway.
    """
    shape = ec2_model().operation_model(action).input_shape
    if shape is None:
        return {}
    return _structure(shape, flat, "")


def _query_name(member: Shape, default: str) -> str:
    # Mirrors botocore.serialize.EC2Serializer._get_serialized_name.
    if "queryName" in member.serialization:
        return member.serialization["queryName"]
    if "name" in member.serialization:
        name = member.serialization["name"]
        return name[0].upper() + name[1:]
    return default


def _has_prefix(flat: Mapping[str, str], prefix: str) -> bool:
    dotted = prefix + "."
    return prefix in flat or any(key.startswith(dotted) for key in flat)


def _value(shape: Shape, flat: Mapping[str, str], key: str) -> Any:
    kind = shape.type_name
    if kind == "structure":
        return _structure(shape, flat, key)
    if kind == "list":
        return _list(shape, flat, key)
    raw = flat[key]
    if kind in ("integer", "long"):
        return int(raw)
    if kind in ("float", "double"):
        return float(raw)
    if kind == "boolean":
        return raw.lower() == "true"
    if kind == "timestamp":
        return _timestamp(raw)
    return raw


def _structure(shape: Shape, flat: Mapping[str, str], prefix: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, member in shape.members.items():
        key = _query_name(member, name)
        if prefix:
            key = f"{prefix}.{key}"
        if member.type_name in ("structure", "list"):
            if _has_prefix(flat, key):
                out[name] = _value(member, flat, key)
        elif key in flat:
            out[name] = _value(member, flat, key)
    return out


def _list(shape: Shape, flat: Mapping[str, str], prefix: str) -> list[Any]:
    indexes: set[int] = set()
    start = prefix + "."
    for key in flat:
        if key.startswith(start):
            head = key[len(start) :].split(".", 1)[0]
            if head.isdigit():
                indexes.add(int(head))
    return [_value(shape.member, flat, f"{prefix}.{i}") for i in sorted(indexes)]


def _timestamp(raw: str) -> dt.datetime:
    try:
        value = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        value = dt.datetime.fromtimestamp(float(raw), tz=dt.UTC)
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value
