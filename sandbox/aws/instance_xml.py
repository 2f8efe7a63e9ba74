"""Patch moto's RunInstances / DescribeInstances XML with what the sandbox knows better.

moto creates the instances, but it does not know the sandbox node behind each one (its
address is the instance's PrivateIpAddress), drops the EFA interface layout and the placement
group, and has no capacity reservations. For each instance the front launched, this rewrites
the ``<item>`` in place and leaves everything else as moto wrote it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any
from xml.etree import ElementTree as ET

from sandbox.aws.query import ec2_model
from sandbox.aws.render import EC2_NAMESPACE, element


@dataclass
class InstanceView:
    """How one instance should look to the SDK."""

    instance_id: str
    region: str
    address: str | None  # the node's address; None while no node is up
    pending: bool  # the node never came up: EC2 would still say "pending"
    group_name: str | None
    reservation_id: str | None
    preference: str | None
    interfaces: list[dict[str, Any]] = field(default_factory=list)  # as requested


def instance_ids(body: bytes) -> list[str]:
    """The instance ids in a RunInstances answer (``instancesSet/item/instanceId``)."""
    root = ET.fromstring(body)
    found = []
    for node in root.iter():
        if _local(node.tag) == "instancesSet":
            for item in node:
                iid = next((c.text for c in item if _local(c.tag) == "instanceId"), None)
                if iid:
                    found.append(iid)
    return found


def patch(body: bytes, views: dict[str, InstanceView]) -> bytes:
    """Rewrite every ``instancesSet/item`` whose instanceId is in ``views``."""
    root = ET.fromstring(body)
    _renamespace(root)
    for item in root.iter(_tag("item")):
        iid = item.findtext(_tag("instanceId"))
        if iid in views and item.find(_tag("instanceState")) is not None:
            _patch_instance(item, views[iid])
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root)


def _patch_instance(item: ET.Element, view: InstanceView) -> None:
    if view.address:
        dns = f"ip-{view.address.replace('.', '-')}.{view.region}.compute.internal"
        _set(item, "privateIpAddress", view.address)
        _set(item, "privateDnsName", dns)
    state = item.find(_tag("instanceState"))
    if view.pending and state is not None and state.findtext(_tag("name")) == "running":
        _set(state, "code", "0")
        _set(state, "name", "pending")
    placement = item.find(_tag("placement"))
    if placement is not None and view.group_name:
        _set(placement, "groupName", view.group_name)
    if view.reservation_id:
        _set(item, "capacityReservationId", view.reservation_id)
    if view.preference or view.reservation_id:
        _replace(item, "CapacityReservationSpecification", _spec(view))
    _patch_interfaces(item, view)


def _spec(view: InstanceView) -> dict[str, Any]:
    if view.reservation_id and view.preference is None:
        return {"CapacityReservationTarget": {"CapacityReservationId": view.reservation_id}}
    return {"CapacityReservationPreference": view.preference or "open"}


def _patch_interfaces(item: ET.Element, view: InstanceView) -> None:
    nic_set = item.find(_tag("networkInterfaceSet"))
    if nic_set is None or not view.interfaces:
        return
    moto_items = nic_set.findall(_tag("item"))
    if not moto_items:
        return
    primary = moto_items[0]
    for extra in moto_items[1:]:
        nic_set.remove(extra)
    wanted = sorted(view.interfaces,
                    key=lambda n: (n.get("NetworkCardIndex", 0), n.get("DeviceIndex", 0)))
    first, rest = wanted[0], wanted[1:]
    _set(primary, "interfaceType", first.get("InterfaceType", "interface"))
    if view.address:
        for node in primary.iter(_tag("privateIpAddress")):
            node.text = view.address
    attachment = primary.find(_tag("attachment"))
    if attachment is not None:
        _set(attachment, "networkCardIndex", str(first.get("NetworkCardIndex", 0)))
    shape = ec2_model().shape_for("InstanceNetworkInterface")
    subnet = primary.findtext(_tag("subnetId"))
    vpc = primary.findtext(_tag("vpcId"))
    for nic in rest:
        card, device = nic.get("NetworkCardIndex", 0), nic.get("DeviceIndex", 0)
        digest = hashlib.sha256(f"{view.instance_id}|{card}|{device}".encode()).hexdigest()
        value = {
            "NetworkInterfaceId": "eni-" + digest[:17],
            "SubnetId": nic.get("SubnetId", subnet),
            "VpcId": vpc,
            "Status": "in-use",
            "Description": nic.get("Description", ""),
            "InterfaceType": nic.get("InterfaceType", "interface"),
            "Groups": [{"GroupId": g} for g in nic.get("Groups", [])],
            "Attachment": {
                "AttachmentId": "eni-attach-" + digest[17:34],
                "DeviceIndex": device,
                "NetworkCardIndex": card,
                "Status": "attached",
                "DeleteOnTermination": nic.get("DeleteOnTermination", True),
            },
        }
        element(nic_set, shape, "item", value)


def _replace(item: ET.Element, shape_member: str, value: dict[str, Any]) -> None:
    shape = ec2_model().shape_for("Instance").members[shape_member]
    name = shape.serialization.get("name", shape_member)
    for old in item.findall(_tag(name)):
        item.remove(old)
    element(item, shape, name, value)


def _set(parent: ET.Element, name: str, text: str) -> None:
    node = parent.find(_tag(name))
    if node is None:
        node = ET.SubElement(parent, _tag(name))
    node.text = text


def _tag(name: str) -> str:
    return f"{{{EC2_NAMESPACE}}}{name}"


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _renamespace(root: ET.Element) -> None:
    """moto writes EC2's namespace without its trailing slash; use EC2's own everywhere."""
    for node in root.iter():
        node.tag = _tag(_local(node.tag)) if isinstance(node.tag, str) else node.tag
