"""EFA device counters read from sysfs over SSH: what ``READ_SCRIPT`` prints, summed per counter.

The efa kernel driver exports per-port counters under
``/sys/class/infiniband/rdmap*/ports/1/hw_counters/`` (``EFA_DEFINE_PORT_STATS`` in amzn-drivers
``kernel/linux/efa/src/efa_verbs.c``; docs/sources.md#efa-hw-counters). The script prints one
``<path> <value>`` line per readable counter file; a node without EFA devices prints nothing.
The ``rdma_write_*`` counters exist only on devices with RDMA write: a missing file is absent,
not zero.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from tasks.errors import ParseError

SYSFS = "/sys/class/infiniband"
# The byte counters a KV transfer over EFA can move (kv-path-proof.md, "EFA device counters").
BYTE_COUNTERS = ("rdma_read_bytes", "rdma_read_resp_bytes", "rdma_write_bytes", "rdma_write_recv_bytes",
                 "send_bytes", "recv_bytes", "tx_bytes", "rx_bytes")
# POSIX sh (no brace expansion): every EFA device, every byte counter it has.
READ_SCRIPT = (f"for d in {SYSFS}/rdmap*; do for c in {' '.join(BYTE_COUNTERS)}; do "
               'f="$d/ports/1/hw_counters/$c"; [ -r "$f" ] && printf \'%s %s\\n\' "$f" "$(cat "$f")"; '
               "done; done; true")
READ_ARGV = ["sh", "-c", READ_SCRIPT]
_LINE = re.compile(rf"^{re.escape(SYSFS)}/(?P<device>[A-Za-z0-9_]+)/ports/\d+/hw_counters/(?P<counter>[a-z_]+)"
                   r" (?P<value>\d{1,20})$")


@dataclass(frozen=True)
class EfaCounters:
    devices: tuple[str, ...]
    totals: dict[str, int]  # counter -> sum over the devices

    @property
    def bytes_moved(self) -> int:
        """Every byte counter summed: a lower bound on what crossed the devices (a transfer may
        show in more than one counter, e.g. emulated RMA in send/recv)."""
        return sum(self.totals.values())


def parse(text: str, where: str = "the node") -> EfaCounters:
    devices: list[str] = []
    totals = dict.fromkeys(BYTE_COUNTERS, 0)
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = _LINE.match(line.strip())
        if not m:
            raise ParseError(f"EFA counters of {where}, line {number}: {shlex.quote(line[:200])} is not "
                             f"'{SYSFS}/<device>/ports/1/hw_counters/<counter> <bytes>'")
        if m["counter"] not in totals:
            continue
        if m["device"] not in devices:
            devices.append(m["device"])
        totals[m["counter"]] += int(m["value"])
    return EfaCounters(tuple(devices), totals)
