"""The EC2 calls the front answers (or patches) itself; everything else goes to moto as is."""

from __future__ import annotations

import threading
from typing import Any
from urllib.parse import urlencode

from botocore.exceptions import ClientError

from sandbox.aws import instance_xml, topology
from sandbox.aws.blocks import CapacityBlocks
from sandbox.aws.capacity import Capacity
from sandbox.aws.config import AwsConfig
from sandbox.aws.faults import FaultBook
from sandbox.aws.instances import Instances
from sandbox.aws.nodes import NodeManagerLike
from sandbox.aws.placement import PlacementGroups
from sandbox.aws.proxy import Moto
from sandbox.aws.quotas import DEFAULT_QUOTAS
from sandbox.aws.render import Ec2Error, response_xml
from sandbox.aws.reservations import ReservationBook
from sandbox.aws.topology import Topology

ANSWERED = frozenset({
    "CreatePlacementGroup", "DescribePlacementGroups", "DeletePlacementGroup",
    "CreateCapacityReservation", "DescribeCapacityReservations", "CancelCapacityReservation",
    "DescribeCapacityBlockOfferings", "PurchaseCapacityBlock", "DescribeInstanceTopology",
    "GetConsoleOutput", "RunInstances", "TerminateInstances",
})
PATCHED = frozenset({"DescribeInstances"})


class Ec2Service:
    def __init__(self, config: AwsConfig, moto: Moto, faults: FaultBook,
                 nodes: NodeManagerLike | None) -> None:
        self._config = config
        self._moto = moto
        self._faults = faults
        self._lock = threading.RLock()
        self._zone_ids: dict[str, dict[str, str]] = {}
        account = config.account_id
        self.groups = PlacementGroups(account, lambda r, n: self.instances.in_group(r, n))
        self.reservations = ReservationBook(account, config.reservation_pending_seconds)
        self.capacity = Capacity(config, self.reservations, self.groups, self.zone_id)
        self.blocks = CapacityBlocks(config, self.reservations, self.zone_id)
        self.topology = Topology(account, config.topology_pair_size)
        # One lock for every model: a launch and a new reservation must not both take the
        # last slot of a pool.
        self.instances = Instances(moto, self.capacity, self.groups, self.topology, faults,
                                   nodes, self.zone_id, self._lock,
                                   {**DEFAULT_QUOTAS, **config.vcpu_quotas})

    def zone_id(self, region: str, zone: str) -> str:
        """The AZ id moto reports for ``zone`` (``us-east-2a`` -> ``use2-az1``)."""
        if region not in self._zone_ids:
            try:
                zones = self._moto.client("ec2", region).describe_availability_zones()
                self._zone_ids[region] = {z["ZoneName"]: z["ZoneId"]
                                          for z in zones["AvailabilityZones"]}
            except ClientError:
                self._zone_ids[region] = {}
        return self._zone_ids[region].get(zone, zone)

    def _zone_named(self, region: str, zone_id: str | None) -> str | None:
        self.zone_id(region, "")
        return next((n for n, i in self._zone_ids[region].items() if i == zone_id), None)

    def handle(self, region: str, action: str, params: dict[str, Any], form: dict[str, str],
               headers: dict[str, str], note: dict[str, Any]) -> tuple[int, bytes] | None:
        """(status, body) for the calls answered here; None to forward the request to moto."""
        if action == "RunInstances":
            return self.instances.run(region, params, form, headers, note)
        zone = params.get("AvailabilityZone") or self._zone_named(
            region, params.get("AvailabilityZoneId"))
        self._faults.raise_for(action, zone, params.get("InstanceType"))
        if action in PATCHED:
            status, _, body = self._moto.forward("POST", "/", headers, _encoded(form))
            if status == 200:
                body = instance_xml.patch(body, self.instances.views())
            return status, body
        if action not in ANSWERED:
            return None
        if action == "TerminateInstances":
            return self.instances.terminate(region, params, form, headers)
        if params.get("DryRun"):
            raise Ec2Error("DryRunOperation",
                           "Request would have succeeded, but DryRun flag is set.")
        with self._lock:
            result = self._answer(region, action, params, zone)
        if result is None:  # GetConsoleOutput for an instance moto launched on its own
            return None
        return 200, response_xml(action, result)

    def _answer(self, region: str, action: str, params: dict[str, Any],
                zone: str | None) -> dict[str, Any] | None:
        if action == "CreatePlacementGroup":
            return self.groups.create(region, params)
        if action == "DescribePlacementGroups":
            return self.groups.describe(region, params)
        if action == "DeletePlacementGroup":
            return self.groups.delete(region, params)
        if action == "CreateCapacityReservation":
            return self._create_reservation(region, params, zone)
        if action == "DescribeCapacityReservations":
            return self.reservations.describe(region, params)
        if action == "CancelCapacityReservation":
            return self.reservations.cancel(region, params)
        if action == "DescribeCapacityBlockOfferings":
            return self.blocks.describe_offerings(region, params)
        if action == "PurchaseCapacityBlock":
            return self.blocks.purchase(region, params)
        if action == "DescribeInstanceTopology":
            return topology.describe(self.instances.placed(region), params,
                                     self._config.topology_empty_seconds)
        if action == "GetConsoleOutput":
            return self.instances.console_output(params)
        raise AssertionError(f"unhandled {action}")

    def _create_reservation(self, region: str, params: dict[str, Any],
                            zone: str | None) -> dict[str, Any]:
        if not zone:
            raise Ec2Error("MissingParameter", "The request must contain the parameter "
                           "AvailabilityZone or AvailabilityZoneId")
        earlier = self.reservations.replay(region, params)
        if earlier is not None:
            return {"CapacityReservation": earlier.describe()}
        return {"CapacityReservation": self.capacity.create_reservation(region, zone, params)
                .describe()}

    def shutdown(self) -> None:
        self.instances.shutdown()


def _encoded(form: dict[str, str]) -> bytes:
    return urlencode(form).encode()
