"""EC2 instances: launch templates, gang launch, describe, topology, console output, terminate."""

from __future__ import annotations

from dataclasses import dataclass

from tasks.adapters.aws_client import call
from tasks.errors import RequestRejected, ResourceGone


@dataclass(frozen=True)
class Instance:
    instance_id: str
    state: str
    zone: str
    private_ip: str
    reservation_id: str
    placement_group: str
    efa_interfaces: int
    launch_time: str
    tags: dict[str, str]


def _instance(i: dict) -> Instance:
    target = (i.get("CapacityReservationSpecification") or {}).get("CapacityReservationTarget") or {}
    nics = i.get("NetworkInterfaces", [])
    return Instance(
        i["InstanceId"], i.get("State", {}).get("Name", ""), i.get("Placement", {}).get("AvailabilityZone", ""),
        i.get("PrivateIpAddress", ""), i.get("CapacityReservationId") or target.get("CapacityReservationId", ""),
        i.get("Placement", {}).get("GroupName", ""),
        sum(1 for n in nics if n.get("InterfaceType") in ("efa", "efa-only")),
        str(i.get("LaunchTime", "")), {t["Key"]: t["Value"] for t in i.get("Tags", [])})


class Ec2Instances:
    def __init__(self, describe, create):
        self._d, self._c = describe, create

    def find_launch_template(self, name: str) -> str | None:
        try:
            out = call(self._d.describe_launch_templates, "DescribeLaunchTemplates", LaunchTemplateNames=[name])
        except (ResourceGone, RequestRejected):
            return None
        found = out.get("LaunchTemplates", [])
        return found[0]["LaunchTemplateId"] if found else None

    def ensure_launch_template(self, request: dict) -> str:
        """Describe by name first; create with the request's ClientToken. Returns the template id."""
        existing = self.find_launch_template(request["LaunchTemplateName"])
        if existing:
            return existing
        out = call(self._c.create_launch_template, "CreateLaunchTemplate", **request)
        return out["LaunchTemplate"]["LaunchTemplateId"]

    def delete_launch_template(self, template_id: str) -> None:
        """Deleting an absent template returns silently."""
        try:
            call(self._c.delete_launch_template, "DeleteLaunchTemplate", LaunchTemplateId=template_id)
        except (ResourceGone, RequestRejected) as e:
            if isinstance(e, RequestRejected) and "NotFound" not in (e.code or ""):
                raise

    def launch_templates(self, filters: list[dict]) -> list[dict]:
        out = call(self._d.describe_launch_templates, "DescribeLaunchTemplates", Filters=filters)
        return out.get("LaunchTemplates", [])

    def run(self, request: dict, zone: str | None = None) -> list[Instance]:
        """Gang launch (MinCount = MaxCount). All or nothing on EC2's side; idempotent by ClientToken."""
        out = call(self._c.run_instances, "RunInstances", zone=zone, **request)
        return [_instance(i) for i in out.get("Instances", [])]

    def describe(self, ids: list[str] | None = None, filters: list[dict] | None = None) -> list[Instance]:
        params: dict = {}
        if ids:
            params["InstanceIds"] = ids
        if filters:
            params["Filters"] = filters
        try:
            out = call(self._d.describe_instances, "DescribeInstances", **params)
        except ResourceGone:
            return []
        return [_instance(i) for r in out.get("Reservations", []) for i in r.get("Instances", [])]

    def terminate(self, ids: list[str]) -> None:
        """Terminating absent or already terminated instances returns silently."""
        if not ids:
            return
        try:
            call(self._c.terminate_instances, "TerminateInstances", InstanceIds=ids)
        except ResourceGone:
            return

    def topology(self, ids: list[str]) -> dict[str, list[str]]:
        """NetworkNodes per instance (top-down); instances the API does not list yet are absent."""
        out: dict[str, list[str]] = {}
        for chunk in [ids[i:i + 100] for i in range(0, len(ids), 100)]:
            token = None
            for _ in range(100):  # bounded pagination
                params: dict = {"InstanceIds": chunk}
                if token:
                    params["NextToken"] = token
                page = call(self._d.describe_instance_topology, "DescribeInstanceTopology", **params)
                for inst in page.get("Instances", []):
                    if inst.get("NetworkNodes"):
                        out[inst["InstanceId"]] = list(inst["NetworkNodes"])
                token = page.get("NextToken")
                if not token:
                    break
        return out

    def console_output(self, instance_id: str) -> str:
        """The console text (botocore already base64-decodes GetConsoleOutput's Output)."""
        out = call(self._d.get_console_output, "GetConsoleOutput", InstanceId=instance_id)
        return out.get("Output") or ""
