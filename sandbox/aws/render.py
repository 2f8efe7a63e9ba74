"""Write EC2 Query protocol responses and errors, driven by botocore's EC2 service model.

A handler returns the dict boto3 would hand back (``{"CapacityReservation": {...}}``); this
module turns it into the XML EC2 sends (``<capacityReservation><capacityReservationId>``,
lists as ``<tagSet><item>``), so botocore's own parser reads it like a real response.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any
from xml.etree import ElementTree as ET

from botocore.model import Shape

from sandbox.aws.query import ec2_model

EC2_NAMESPACE = "http://ec2.amazonaws.com/doc/2016-11-15/"
ET.register_namespace("", EC2_NAMESPACE)

# HTTP status EC2 answers each error code with; botocore's retry logic looks at it
# (5xx are retried by default), so it matters as much as the code itself.
ERROR_STATUS = {
    "RequestLimitExceeded": 503,
    "ServiceUnavailable": 503,
    "Unavailable": 503,
    "InternalError": 500,
    "InternalFailure": 500,
    "InsufficientInstanceCapacity": 500,
    "InsufficientCapacity": 500,
    "InsufficientReservedInstanceCapacity": 500,
    "InsufficientHostCapacity": 500,
    "DryRunOperation": 412,
}


class Ec2Error(Exception):
    """An EC2 API error: becomes ``<Response><Errors><Error>`` with EC2's HTTP status."""

    def __init__(self, code: str, message: str, status: int | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status if status is not None else ERROR_STATUS.get(code, 400)


def request_id() -> str:
    return str(uuid.uuid4())


def error_xml(error: Ec2Error) -> bytes:
    root = ET.Element("Response")
    err = ET.SubElement(ET.SubElement(root, "Errors"), "Error")
    ET.SubElement(err, "Code").text = error.code
    ET.SubElement(err, "Message").text = error.message
    ET.SubElement(root, "RequestID").text = request_id()
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root)


def response_xml(action: str, result: dict[str, Any]) -> bytes:
    """``result`` in boto3's shape for ``action`` -> the XML body EC2 would send."""
    root = ET.Element(f"{{{EC2_NAMESPACE}}}{action}Response")
    ET.SubElement(root, f"{{{EC2_NAMESPACE}}}requestId").text = request_id()
    shape = ec2_model().operation_model(action).output_shape
    if shape is not None:
        _members(root, shape, result)
    elif "Return" in result:
        ET.SubElement(root, f"{{{EC2_NAMESPACE}}}return").text = _text(result["Return"])
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root)


def element(parent: ET.Element, shape: Shape, name: str, value: Any) -> ET.Element:
    """Append ``value`` (of ``shape``) to ``parent`` as element ``name`` (namespaced)."""
    node = ET.SubElement(parent, f"{{{EC2_NAMESPACE}}}{name}")
    if shape.type_name == "structure":
        _members(node, shape, value)
    elif shape.type_name == "list":
        item_name = shape.member.serialization.get("name", "item")
        for item in value:
            element(node, shape.member, item_name, item)
    else:
        node.text = _text(value)
    return node


def _members(parent: ET.Element, shape: Shape, value: dict[str, Any]) -> None:
    for name, member in shape.members.items():
        if name in value and value[name] is not None:
            element(parent, member, member.serialization.get("name", name), value[name])


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.datetime):
        return iso(value)
    return str(value)


def iso(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
