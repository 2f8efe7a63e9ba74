"""RunInstances / TerminateInstances / DescribeInstances / GetConsoleOutput around moto.

RunInstances: resolve the launch template, enforce capacity (reservation targets, the AZ
pool), let moto create the instances, then boot one sandbox node per instance and answer with
the node addresses. TerminateInstances: moto terminates, the node stops, the slot frees.
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from botocore.exceptions import ClientError

from sandbox.aws import instance_xml
from sandbox.aws.capacity import Capacity
from sandbox.aws.faults import FaultBook
from sandbox.aws.filters import tags_for
from sandbox.aws.instance_xml import InstanceView
from sandbox.aws.nodes import NodeManagerLike, boot_node, console_text
from sandbox.aws.placement import PlacementGroups
from sandbox.aws.proxy import Moto
from sandbox.aws.quotas import check_vcpus
from sandbox.aws.render import Ec2Error
from sandbox.aws.topology import Placed, Topology

log = logging.getLogger(__name__)


@dataclass
class Launched:
    view: InstanceView
    placed: Placed
    booted: bool = False
    host_key_lines: tuple[str, ...] = ()
    terminated: bool = False
    on_demand: bool = True  # counts toward the On-Demand vCPU quota (Capacity Blocks do not)


class Instances:
    def __init__(self, moto: Moto, capacity: Capacity, groups: PlacementGroups,
                 topology: Topology, faults: FaultBook, nodes: NodeManagerLike | None,
                 zone_id: Any, lock: threading.RLock, quotas: dict[str, int]) -> None:
        self._moto = moto
        self._capacity = capacity
        self._groups = groups
        self._topology = topology
        self._faults = faults
        self._nodes = nodes
        self._zone_id = zone_id
        self._lock = lock
        self._quotas = quotas
        self._vcpus: dict[str, int] = {}
        self._launched: dict[str, Launched] = {}
        self._tokens: dict[tuple[str, str], tuple[dict[str, Any], bytes]] = {}

    # ---- queries used by the other models -----------------------------------------------
    def in_group(self, region: str, name: str) -> bool:
        return any(not x.terminated and x.view.region == region and x.view.group_name == name
                   for x in self._launched.values())

    def placed(self, region: str) -> list[Placed]:
        """Instances that DescribeInstanceTopology reports: running (booted), not terminated."""
        return [x.placed for x in self._launched.values()
                if x.booted and not x.terminated and x.view.region == region]

    def views(self) -> dict[str, InstanceView]:
        return {iid: x.view for iid, x in self._launched.items()}

    # ---- RunInstances -------------------------------------------------------------------
    def run(self, region: str, params: dict[str, Any], form: dict[str, str],
            headers: dict[str, str], note: dict[str, Any]) -> tuple[int, bytes]:
        template = self._template_data(region, params.get("LaunchTemplate"))
        if template:
            note["launch_template_data"] = template
        eff = _effective(template, params)
        itype = eff.get("InstanceType")
        if not itype:
            raise Ec2Error("MissingParameter", "The request must contain the parameter "
                           "InstanceType")
        spec = eff.get("CapacityReservationSpecification", {})
        target = spec.get("CapacityReservationTarget", {}).get("CapacityReservationId")
        zone = self._zone(region, eff, target)
        self._faults.raise_for("RunInstances", zone, itype)
        if params.get("DryRun"):
            raise Ec2Error("DryRunOperation", "Request would have succeeded, but DryRun flag "
                           "is set.")
        group = eff.get("Placement", {}).get("GroupName") or None
        if group and self._groups.get(region, group) is None:
            raise Ec2Error("InvalidPlacementGroup.Unknown",
                           f"The Placement Group '{group}' is unknown.")
        with self._lock:
            token = params.get("ClientToken")
            compared = {k: v for k, v in params.items() if k != "DryRun"}
            if token and (region, token) in self._tokens:
                original, body = self._tokens[(region, token)]
                if original != compared:
                    raise Ec2Error("IdempotentParameterMismatch", f"The client token '{token}' "
                                   "has already been used with different parameters.")
                if any(self._launched[i].terminated for i in instance_xml.instance_ids(body)
                       if i in self._launched):
                    # EC2's error-code list: "IdempotentInstanceTerminated: The request to launch
                    # an instance uses the same client token as a previous request for which the
                    # instance has been terminated." (never the terminated instances again)
                    raise Ec2Error("IdempotentInstanceTerminated", "The request to launch an "
                                   "instance uses the same client token as a previous request "
                                   "for which the instance has been terminated.")
                return 200, instance_xml.patch(body, self.views())
            market = eff.get("InstanceMarketOptions", {}).get("MarketType")
            if market != "capacity-block":
                running = [(x.placed.instance_type, self._vcpus_of(region, x.placed.instance_type))
                           for x in self._launched.values() if x.on_demand and not x.terminated]
                check_vcpus(self._quotas, itype, self._vcpus_of(region, itype),
                            params["MinCount"], running)
            plan = self._capacity.plan_launch(region, zone, itype, params["MinCount"],
                                              params["MaxCount"], spec, market)
            status, body = self._create(region, form, headers, plan.count, zone, eff)
            if status != 200:
                return status, body
            ids = instance_xml.instance_ids(body)
            if token:
                # Recorded before the nodes boot: an SDK retry that arrives meanwhile (same
                # token) gets these instances, never a second launch.
                self._tokens[(region, token)] = (compared, body)
            self._capacity.commit(plan, ids)
            key = group or "launch:" + ids[0]
            for iid in ids:
                view = InstanceView(
                    instance_id=iid, region=region, address=None, pending=True,
                    group_name=group, reservation_id=plan.reservation_id,
                    preference=spec.get("CapacityReservationPreference"),
                    interfaces=eff.get("NetworkInterfaces", []),
                )
                placed = Placed(iid, itype, zone, self._zone_id(region, zone), group,
                                self._topology.assign(zone, key, itype))
                self._launched[iid] = Launched(view, placed,
                                               on_demand=market != "capacity-block")
        note["instance_ids"] = ids
        if self._faults.take_never_boot():
            note["never_boot"] = True
        else:
            self._boot(ids, eff, note)
        return 200, instance_xml.patch(body, self.views())

    def _create(self, region: str, form: dict[str, str], headers: dict[str, str], count: int,
                zone: str, eff: dict[str, Any]) -> tuple[int, bytes]:
        sent = dict(form)
        sent["MaxCount"] = str(count)
        sent["MinCount"] = str(min(int(form.get("MinCount", count)), count))
        # moto keeps one interface per device index and drops the EFA layout; send it the
        # primary only and describe the rest from the request (instance_xml).
        for key in [k for k in sent if k.startswith("NetworkInterface.")]:
            if not key.startswith("NetworkInterface.1."):
                del sent[key]
        if not _subnet(eff) and "Placement.AvailabilityZone" not in sent:
            sent["Placement.AvailabilityZone"] = zone  # the zone the capacity came from
        body = urlencode(sent).encode()
        headers = {**headers, "Content-Type": "application/x-www-form-urlencoded; charset=utf-8"}
        status, _, data = self._moto.forward("POST", "/", headers, body)
        return status, data

    def _boot(self, ids: list[str], eff: dict[str, Any], note: dict[str, Any]) -> None:
        if self._nodes is None:
            return
        user_data = _decoded(eff.get("UserData"))
        tags = {t["Key"]: t["Value"] for t in tags_for(eff.get("TagSpecifications", []),
                                                       "instance")}

        def boot(iid: str) -> None:
            launched = self._launched[iid]
            try:
                node = boot_node(self._nodes, iid, user_data, tags,
                                 list(launched.placed.network_nodes),
                                 launched.placed.instance_type, launched.placed.zone)
            except Exception as exc:
                log.exception("node for %s did not boot", iid)
                note.setdefault("boot_errors", {})[iid] = str(exc)
                return
            with self._lock:
                launched.view.address = node.address
                launched.host_key_lines = tuple(node.host_key_lines)
                launched.view.pending = False
                launched.booted = True

        with ThreadPoolExecutor(max_workers=min(8, max(len(ids), 1))) as pool:
            list(pool.map(boot, ids))

    # ---- TerminateInstances -------------------------------------------------------------
    def terminate(self, region: str, params: dict[str, Any], form: dict[str, str],
                  headers: dict[str, str]) -> tuple[int, bytes]:
        if params.get("DryRun"):
            raise Ec2Error("DryRunOperation", "Request would have succeeded, but DryRun flag "
                           "is set.")
        status, _, data = self._moto.forward("POST", "/", headers, urlencode(form).encode())
        if status != 200:
            return status, data
        for iid in params.get("InstanceIds", []):
            self.stop_node(iid)
        return status, data

    def stop_node(self, iid: str) -> None:
        with self._lock:
            launched = self._launched.get(iid)
            if launched is None or launched.terminated:
                return
            launched.terminated = True
            self._capacity.release(iid)
            booted = launched.booted
        if booted and self._nodes is not None:
            try:
                self._nodes.terminate(iid)
            except Exception:
                log.exception("node for %s did not stop cleanly", iid)

    def shutdown(self) -> None:
        for iid in list(self._launched):
            self.stop_node(iid)

    # ---- GetConsoleOutput ---------------------------------------------------------------
    def console_output(self, params: dict[str, Any]) -> dict[str, Any] | None:
        """The console of a sandbox instance; None for instances this front did not launch."""
        iid = params["InstanceId"]
        launched = self._launched.get(iid)
        if launched is None:
            return None
        now = dt.datetime.now(dt.UTC)
        if not launched.booted or launched.terminated or self._nodes is None:
            return {"InstanceId": iid, "Timestamp": now}  # EC2: no output yet
        node_log = self._nodes.console_output(iid)
        text = console_text(iid, launched.view.address or "", list(launched.host_key_lines),
                            node_log)
        return {"InstanceId": iid, "Timestamp": now,
                "Output": base64.b64encode(text.encode()).decode()}

    # ---- helpers ------------------------------------------------------------------------
    def _template_data(self, region: str, ref: dict[str, Any] | None) -> dict[str, Any]:
        if not ref:
            return {}
        args: dict[str, Any] = {"Versions": [str(ref.get("Version", "$Default"))]}
        if ref.get("LaunchTemplateId"):
            args["LaunchTemplateId"] = ref["LaunchTemplateId"]
        else:
            args["LaunchTemplateName"] = ref.get("LaunchTemplateName", "")
        try:
            found = self._moto.client("ec2", region).describe_launch_template_versions(**args)
        except ClientError as e:
            err = e.response.get("Error", {})
            raise Ec2Error(err.get("Code", "InvalidLaunchTemplateId.NotFound"),
                           err.get("Message", "launch template not found")) from e
        versions = found.get("LaunchTemplateVersions", [])
        return versions[0].get("LaunchTemplateData", {}) if versions else {}

    def _vcpus_of(self, region: str, instance_type: str) -> int:
        if instance_type not in self._vcpus:
            try:
                found = self._moto.client("ec2", region).describe_instance_types(
                    InstanceTypes=[instance_type])["InstanceTypes"]
            except ClientError as e:
                raise Ec2Error("InvalidParameterValue",
                               f"Invalid instance type: {instance_type}") from e
            self._vcpus[instance_type] = found[0]["VCpuInfo"]["DefaultVCpus"] if found else 0
        return self._vcpus[instance_type]

    def _zone(self, region: str, eff: dict[str, Any], target: str | None) -> str:
        zone = eff.get("Placement", {}).get("AvailabilityZone")
        if zone:
            return zone
        subnet = _subnet(eff)
        if subnet:
            try:
                found = self._moto.client("ec2", region).describe_subnets(SubnetIds=[subnet])
            except ClientError as e:
                err = e.response.get("Error", {})
                raise Ec2Error(err.get("Code", "InvalidSubnetID.NotFound"),
                               err.get("Message", f"The subnet ID '{subnet}' does not exist")
                               ) from e
            return found["Subnets"][0]["AvailabilityZone"]
        if target:
            return self._capacity.reservations.get(region, target).zone
        return region + "a"  # where EC2 (and moto) put an instance given no hint


def _effective(template: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """Launch template data overridden by the request, as EC2 combines them."""
    eff = {**template, **{k: v for k, v in params.items() if k != "LaunchTemplate"}}
    if "Placement" in template and "Placement" in params:
        eff["Placement"] = {**template["Placement"], **params["Placement"]}
    return eff


def _subnet(eff: dict[str, Any]) -> str | None:
    if eff.get("SubnetId"):
        return eff["SubnetId"]
    for nic in eff.get("NetworkInterfaces", []):
        if nic.get("DeviceIndex", 0) == 0 and nic.get("NetworkCardIndex", 0) == 0:
            return nic.get("SubnetId")
    return None


def _decoded(user_data: str | None) -> str | None:
    if not user_data:
        return None
    try:
        return base64.b64decode(user_data, validate=True).decode("utf-8", "replace")
    except ValueError:
        return user_data
