"""Scripted faults for the AWS endpoint, set by tests through ``POST /__sandbox/faults``.

Two kinds:

* an API error for a named call: ``{"action": "RunInstances", "code":
  "InsufficientInstanceCapacity", "zone": "us-east-2a", "times": 2}``. ``action`` may be "*"
  (every EC2 call), ``zone`` narrows it to requests for that AZ, ``times`` counts how many
  matching requests fail (-1: all of them), ``message`` and ``status`` override the defaults.
* a launch that never boots: ``{"fault": "never-boot", "times": 1}``: RunInstances succeeds,
  but the instances stay ``pending`` and no node comes up for them.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass
from typing import Any

from sandbox.aws.render import ERROR_STATUS, Ec2Error

KNOWN_CODES = {
    "InsufficientInstanceCapacity": "We currently do not have sufficient {type} capacity in the "
    "Availability Zone you requested ({zone}). Our system will be working on provisioning "
    "additional capacity.",
    "RequestLimitExceeded": "Request limit exceeded.",
    "Unsupported": "Your requested instance type ({type}) is not supported in your requested "
    "Availability Zone ({zone}).",
    "ReservationCapacityExceeded": "The requested reservation does not have sufficient "
    "compatible and available capacity for this request.",
    "InternalError": "An internal error has occurred.",
    "VcpuLimitExceeded": "You have requested more vCPU capacity than your current vCPU limit "
    "allows for the instance bucket that the specified instance type belongs to.",
    # EC2's error-code list: "You've reached the limit for this account. The returned message
    # provides details." (DescribeCapacityBlockOfferings)
    "CapacityBlockDescribeLimitExceeded": "You've reached the limit for this account.",
}
NEVER_BOOT = "never-boot"


@dataclass
class Fault:
    id: int
    action: str
    code: str | None = None
    zone: str | None = None
    times: int = 1
    message: str | None = None
    status: int | None = None
    fault: str | None = None

    def matches(self, action: str, zone: str | None) -> bool:
        if self.times == 0 or self.fault is not None:
            return False
        if self.action not in ("*", action):
            return False
        return self.zone is None or self.zone == zone


class FaultBook:
    """Faults in the order they were added; the first that matches a request fires."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: list[Fault] = []
        self._next_id = 1

    def add(self, spec: dict[str, Any]) -> Fault:
        fault = _validated(spec)
        with self._lock:
            fault.id = self._next_id
            self._next_id += 1
            self._faults.append(fault)
        return fault

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def listing(self) -> list[dict[str, Any]]:
        with self._lock:
            return [asdict(f) for f in self._faults]

    def raise_for(self, action: str, zone: str | None, instance_type: str | None = None) -> None:
        """Raise the first matching API fault (using up one of its ``times``)."""
        with self._lock:
            fault = next((f for f in self._faults if f.matches(action, zone)), None)
            if fault is None:
                return
            _use(fault)
        assert fault.code is not None
        template = fault.message or KNOWN_CODES.get(fault.code, f"Injected {fault.code}.")
        message = template.format(type=instance_type or "instance", zone=zone or "unknown")
        raise Ec2Error(fault.code, message, fault.status)

    def take_never_boot(self) -> bool:
        """True (using up one of its ``times``) when the next launch must never boot."""
        with self._lock:
            for fault in self._faults:
                if fault.fault == NEVER_BOOT and fault.times != 0:
                    _use(fault)
                    return True
        return False


def _use(fault: Fault) -> None:
    if fault.times > 0:
        fault.times -= 1


def _validated(spec: dict[str, Any]) -> Fault:
    if not isinstance(spec, dict):
        raise ValueError("a fault is a JSON object")
    allowed = {"action", "code", "zone", "times", "message", "status", "fault"}
    unknown = set(spec) - allowed
    if unknown:
        raise ValueError(f"unknown fault keys {sorted(unknown)}; allowed: {sorted(allowed)}")
    times = int(spec.get("times", 1))
    if times < -1 or times == 0:
        raise ValueError("times must be a positive count or -1 (forever)")
    if spec.get("fault") is not None:
        if spec["fault"] != NEVER_BOOT:
            raise ValueError(f"unknown fault {spec['fault']!r}; known: {NEVER_BOOT!r}")
        return Fault(id=0, action=spec.get("action", "RunInstances"), fault=NEVER_BOOT, times=times)
    if not spec.get("action") or not spec.get("code"):
        raise ValueError("an API fault needs 'action' (or '*') and 'code'")
    status = spec.get("status")
    if status is not None and not 400 <= int(status) <= 599:
        raise ValueError("status must be an HTTP error status (400-599)")
    return Fault(
        id=0,
        action=str(spec["action"]),
        code=str(spec["code"]),
        zone=spec.get("zone"),
        times=times,
        message=spec.get("message"),
        status=int(status) if status is not None else ERROR_STATUS.get(str(spec["code"])),
    )
