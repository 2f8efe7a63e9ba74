"""Two processes moving a KV-sized DRAM buffer with the real Mooncake Transfer Engine over tcp.

Run by the real-engine venv's interpreter inside the engines' network namespace (Mooncake binds
every interface whatever host it is given: real-parts.md), as the MooncakeConnector's two sides
would: P2PHANDSHAKE (no etcd), the target registers a buffer and waits, the initiator writes its
bytes into it with ``transfer_sync_write`` and reads them back with ``transfer_sync_read``.

    python mooncake_pair.py target BYTES      prints "READY <host:rpc port> <address> <bytes>", then
                                              on a line from stdin, "TARGET sha256 <hex>" of its buffer
    python mooncake_pair.py initiator PEER ADDRESS BYTES
                                              prints "WRITE rc=<rc> <s>", "READ rc=<rc> equal=<bool>"
                                              and "INITIATOR sha256 <hex>" of what it wrote

The Transfer Engine's own log lines go to stderr (glog), which is what the canary reads.
"""

from __future__ import annotations

import hashlib
import sys
import time


def _engine():
    from mooncake.engine import TransferEngine

    engine = TransferEngine()
    rc = engine.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "")
    if rc != 0:
        raise SystemExit(f"TransferEngine.initialize(tcp) returned {rc}")
    return engine


def target(size: int) -> int:
    import numpy as np

    engine = _engine()
    buffer = np.zeros(size, dtype=np.uint8)
    if engine.register_memory(buffer.ctypes.data, size) != 0:
        raise SystemExit("register_memory failed")
    print(f"READY 127.0.0.1:{engine.get_rpc_port()} {buffer.ctypes.data} {size}", flush=True)
    sys.stdin.readline()
    print(f"TARGET sha256 {hashlib.sha256(buffer.tobytes()).hexdigest()}", flush=True)
    return 0


def initiator(peer: str, address: int, size: int) -> int:
    import numpy as np

    engine = _engine()
    source = np.random.default_rng(7).integers(0, 256, size, dtype=np.uint8)
    back = np.zeros(size, dtype=np.uint8)
    for buf in (source, back):
        if engine.register_memory(buf.ctypes.data, size) != 0:
            raise SystemExit("register_memory failed")
    started = time.monotonic()
    rc = engine.transfer_sync_write(peer, source.ctypes.data, address, size)
    print(f"WRITE rc={rc} {time.monotonic() - started:.3f}", flush=True)
    rc_read = engine.transfer_sync_read(peer, back.ctypes.data, address, size)
    print(f"READ rc={rc_read} equal={bool(np.array_equal(source, back))}", flush=True)
    print(f"INITIATOR sha256 {hashlib.sha256(source.tobytes()).hexdigest()}", flush=True)
    return 0 if rc == rc_read == 0 else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["target"] and len(sys.argv) == 3:
        sys.exit(target(int(sys.argv[2])))
    if sys.argv[1:2] == ["initiator"] and len(sys.argv) == 5:
        sys.exit(initiator(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
    sys.exit(__doc__)
