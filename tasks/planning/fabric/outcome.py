"""What fabric validation measured and concluded: the data the stage produces and the report reads. Pure.

    Ran         how one remote command ended (exit, output, timing), never an exception
    Inventory   one node's GPUs, EFA devices and tool versions
    Cache       every node's and pair's measurements, kept across passes until a node is replaced
    Layer       one layer's verdicts, the nodes it isolates with their evidence, or why to stop
    PassResult  one pass over the fleet, layer by layer
    Outcome     the whole validation: passes, replacements, the fleet it ends with
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tasks.errors import FabricCheckFailed
from tasks.parsing.fi_info import FiInfoResult
from tasks.parsing.nvidia_smi import GpuInventory
from tasks.planning.fabric.pairing import Pair
from tasks.planning.fabric.records import NcclRun, PairRuns, PingpongRun, VerdictRecord
from tasks.planning.records import Node


@dataclass(frozen=True)
class Ran:
    """How one remote command ended."""

    node: str
    command: str
    exit_code: int | None  # None: it never finished (timeout) or never started (unreachable)
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False
    error: str | None = None  # transport problem or timeout, in words

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def tail(self, n: int = 6) -> str:
        lines = (self.stderr or self.stdout).strip().splitlines()
        return " | ".join(lines[-n:])[-600:]


@dataclass(frozen=True)
class Inventory:
    gpus: GpuInventory | None
    fi_info: FiInfoResult | None
    error: str | None
    versions: dict[str, str]

    @property
    def devices(self) -> tuple[str, ...]:
        return self.fi_info.devices("efa") if self.fi_info is not None else ()


@dataclass
class Cache:
    """What each node and pair measured, kept across passes until the node is replaced."""

    inventory: dict[str, Inventory] = field(default_factory=dict)
    loopback: dict[tuple[str, str], PingpongRun] = field(default_factory=dict)
    control: dict[str, PingpongRun] = field(default_factory=dict)
    single: dict[str, NcclRun] = field(default_factory=dict)
    pairs: dict[Pair, PairRuns] = field(default_factory=dict)
    second_pass: dict[Pair, PairRuns] = field(default_factory=dict)
    full_set: tuple[NcclRun, ...] = ()

    def forget(self, node: str) -> None:
        for table in (self.inventory, self.control, self.single):
            table.pop(node, None)
        for table in (self.loopback, self.pairs, self.second_pass):
            for key in [k for k in table if node in k]:
                del table[key]
        self.full_set = ()


@dataclass
class Layer:
    name: str
    records: tuple[VerdictRecord, ...] = ()
    isolate: dict[str, str] = field(default_factory=dict)  # node -> evidence
    stop: str | None = None  # why the stage must stop without replacing anything
    seconds: float = 0.0
    rounds: int = 0
    leftovers: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class PassResult:
    number: int
    nodes: tuple[Node, ...]
    layers: list[Layer] = field(default_factory=list)
    node_records: tuple[VerdictRecord, ...] = ()
    seconds: float = 0.0
    layers_expected: int = 0  # how many layers a clean pass runs on this many nodes

    @property
    def isolate(self) -> dict[str, str]:
        return self.layers[-1].isolate if self.layers else {}

    @property
    def stop(self) -> str | None:
        return self.layers[-1].stop if self.layers else None

    @property
    def passed(self) -> bool:
        return bool(self.layers) and not self.isolate and not self.stop and len(self.layers) == self.layers_expected


@dataclass
class Outcome:
    passed: bool
    nodes: tuple[Node, ...]  # the fleet after any replacement
    passes: list[PassResult]
    replaced: list[tuple[str, str, str]]  # (old node, new node, evidence)
    failure: str | None
    seconds: float
    versions: dict[str, dict[str, str]]
    cache: Cache

    def raise_for_failure(self) -> None:
        if not self.passed:
            raise FabricCheckFailed(self.failure or "fabric validation failed")


