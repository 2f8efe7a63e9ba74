"""The EFA byte counters of the nodes a role runs on, read over SSH (the canary's fabric evidence).

One ``cat`` of ``/sys/class/infiniband/rdmap*/ports/1/hw_counters/*`` per node
(``tasks.parsing.efa_counters``); nodes are named as Kubernetes names them (a pod's ``spec.nodeName``)
and reached as the fleet's SSH targets, host keys pinned.
"""

from __future__ import annotations

from tasks.adapters.ssh import SshNode
from tasks.errors import PdliftError
from tasks.parsing import efa_counters
from tasks.stages.ports import Shell

READ_TIMEOUT_S = 30.0


class NodeCounters:
    def __init__(self, shell: Shell, targets: dict[str, SshNode], timeout_s: float = READ_TIMEOUT_S):
        self.shell, self.targets, self.timeout_s = shell, targets, timeout_s

    def total(self, nodes: list[str]) -> tuple[int | None, str]:
        """Every EFA byte counter summed over the devices of ``nodes``; (None, why) when any node's
        counters cannot be read (not in the fleet, unreachable, no EFA device, unreadable output)."""
        total = 0
        for name in sorted(set(nodes)):
            target = self.targets.get(name)
            if target is None:
                return None, f"node {name} is not one of this run's fleet, so pdlift has no SSH target for it"
            try:
                result = self.shell.run(target, efa_counters.READ_ARGV, timeout_s=self.timeout_s)
                counters = efa_counters.parse(result.stdout, f"{name} ({target.name})")
            except PdliftError as e:
                return None, f"{name}: {e}"
            if not counters.devices:
                return None, f"{name} ({target.name}) shows no EFA device under {efa_counters.SYSFS}"
            total += counters.bytes_moved
        return total, ""
