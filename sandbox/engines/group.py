"""Multi-node engine groups: the leader becomes ready only when every rank has joined.

Stands in for torch.distributed / the vLLM DP coordinator rendezvous. The leader (rank 0)
listens on the rendezvous port (vLLM --master-port or --data-parallel-rpc-port; SGLang the port
of --dist-init-addr) on its node address; every other rank connects to the leader's address
(resolved without DNS, retried until PDLIFT_SANDBOX_GROUP_TIMEOUT_S, default 600 s), sends
``{"rank": r}`` and waits for ``ready``. Once the group is complete, losing a peer is fatal for
the survivors (exit 1), as an NCCL communicator failure is: LeaderWorkerSet recreates the group.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

from sandbox.engines.config import EngineConfig
from sandbox.engines.settings import bind_address, resolve_host
from sandbox.engines.state import log


def _fatal(message: str) -> None:
    log(message, "ERROR")
    sys.stdout.flush()
    os._exit(1)


class Leader:
    def __init__(self, cfg: EngineConfig, ready: list[asyncio.Event]):
        self.cfg, self.ready = cfg, ready
        self.members: dict[int, asyncio.StreamWriter] = {}
        self.server: asyncio.base_events.Server | None = None

    async def start(self) -> None:
        if self.cfg.group_size <= 1:
            self._complete()
            return
        self.server = await asyncio.start_server(self._member, bind_address(), self.cfg.rendezvous_port)
        log(f"waiting for {self.cfg.group_size - 1} more rank(s) on port {self.cfg.rendezvous_port}")

    def _complete(self) -> None:
        for event in self.ready:
            event.set()

    async def _member(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            hello = json.loads(await asyncio.wait_for(reader.readline(), 30))
            rank = int(hello["rank"])
        except (ValueError, KeyError, asyncio.TimeoutError):
            writer.close()
            return
        if rank in self.members or not 0 < rank < self.cfg.group_size:
            writer.write(b'{"error": "duplicate or invalid rank"}\n')
            writer.close()
            return
        self.members[rank] = writer
        log(f"rank {rank} joined ({len(self.members) + 1}/{self.cfg.group_size})")
        if len(self.members) == self.cfg.group_size - 1:
            for member in self.members.values():
                member.write(b"ready\n")
            self._complete()
            log("all ranks joined; the group is ready")
        await reader.read()  # EOF: the member is gone
        if self.ready[0].is_set():
            _fatal(f"rank {rank} left the group; the communicator is broken")
        self.members.pop(rank, None)


async def join(cfg: EngineConfig, ready: list[asyncio.Event]) -> None:
    """A non-leader rank: connect to the leader, wait for the group, then watch the link."""
    deadline = time.monotonic() + float(os.environ.get("PDLIFT_SANDBOX_GROUP_TIMEOUT_S", "600"))
    while True:
        try:
            host = resolve_host(cfg.rendezvous_host)
            reader, writer = await asyncio.open_connection(host, cfg.rendezvous_port)
            writer.write(json.dumps({"rank": cfg.group_rank}).encode() + b"\n")
            await writer.drain()
            line = await reader.readline()
            if line.strip() == b"ready":
                break
            writer.close()
        except (OSError, LookupError):
            pass
        if time.monotonic() > deadline:
            _fatal(f"timed out joining the group at {cfg.rendezvous_host}:{cfg.rendezvous_port}")
        await asyncio.sleep(0.2)
    log(f"rank {cfg.group_rank} joined the group led by {cfg.rendezvous_host}:{cfg.rendezvous_port}")
    for event in ready:
        event.set()
    await reader.read()
    _fatal("lost the connection to the group leader; the communicator is broken")
