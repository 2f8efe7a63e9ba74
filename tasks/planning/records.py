"""What each stage hands the next: one frozen record per stage result, and their one serializer. Pure.

    reserve   -> Reserved        the reservation (and placement group) the fleet launches into
    launch    -> Fleet           the nodes, one ``Node`` type everywhere, with their roles and topology
    fabric    -> FabricVerdict   passed or not, and the fleet after any replacement (a failed one
                                 is recorded too, so the run knows its nodes; it is not "done")
    weights   -> StagedWeights   what each node holds and fetched
    deploy    -> Deployed        the candidate colour that is up and passed its canary
    benchmark -> GateResult      the gate's verdict and what was promoted (a FAIL raises instead)
    handover  -> Handover        a ``fleet`` update moving the stack to a second fleet (run)
    teardown  -> TornDown        how many resources were released

Records are stored in the run ledger as plain JSON (``to_dict``) and read back with
``from_dict``, which follows each field's type hint (nested records, tuples, optionals), so a
record written today reads back as the same value. The stage a record belongs to is a property
of its type (``stage_of``): nobody can file a fleet under "reserve".
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from typing import Any, Union

from tasks.errors import FabricCheckFailed


@dataclass(frozen=True)
class Node:
    """One GPU node, as every stage sees it: EC2 instance, EKS node, SSH target and fabric subject.

    ``host_keys`` are the SSH host key lines pinned from the instance's console output; empty
    until they are known (a node without them is never connected to)."""

    instance_id: str
    address: str
    role: str
    host_keys: tuple[str, ...] = ()
    node_name: str = ""
    zone: str = ""
    network_nodes: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """How fabric results, SSH errors and reports name the node: its instance id."""
        return self.instance_id


@dataclass(frozen=True)
class Reserved:
    reservation_id: str
    zone: str
    placement_group: str | None
    capacity_block: bool
    blocked_zones: tuple[str, ...]
    adopted: bool
    # When the capacity can be used and when it ends ("YYYY-MM-DDTHH:MM:SSZ", "" when unknown):
    # a Capacity Block is sold for a future start and refuses launches before it.
    starts_at: str = ""
    ends_at: str = ""


@dataclass(frozen=True)
class Fleet:
    nodes: tuple[Node, ...]
    launch_template_id: str
    shared_layer: int
    replaced: tuple[str, ...]

    def addresses(self, role: str | None = None) -> list[str]:
        return [n.address for n in self.nodes if role is None or n.role == role]

    def instance_ids(self) -> list[str]:
        return [n.instance_id for n in self.nodes]


@dataclass(frozen=True)
class Replacement:
    old: str
    new: str
    evidence: str = ""


@dataclass(frozen=True)
class FabricVerdict:
    passed: bool
    failure: str | None
    seconds: float
    passes: int
    results: str                         # where the raw results and the report were written
    replaced: tuple[Replacement, ...]
    fleet: Fleet                         # the fleet after any replacement: what later stages use

    def raise_for_failure(self) -> None:
        """A failed validation is recorded too (the fleet it leaves may have new nodes), then stops the run."""
        if not self.passed:
            raise FabricCheckFailed(self.failure or "fabric validation failed")


@dataclass(frozen=True)
class NodeWeights:
    node: str
    bytes_total: int
    bytes_fetched: int
    seconds: float


@dataclass(frozen=True)
class StagedWeights:
    nodes: tuple[NodeWeights, ...]

    @property
    def bytes_fetched(self) -> int:
        return sum(n.bytes_fetched for n in self.nodes)


@dataclass(frozen=True)
class Deployed:
    deployment: str
    colour: str
    live_colour: str | None
    engines_namespace: str
    router_namespace: str
    router_service: str
    phases_s: dict[str, float]
    bring_up_s: float                    # first apply -> canary passed
    canary: str
    # Tells one deploy of a run from the next (redeploys reuse the fleet's run id): the benchmark
    # and the gate are cached per generation, never across deploys.
    generation: str = ""

    @property
    def router(self) -> str:
        return f"{self.router_namespace}/{self.router_service}"


@dataclass(frozen=True)
class GateVerdict:
    outcome: str                         # PASS | FAIL | INCONCLUSIVE
    reasons: tuple[str, ...]
    plot: str
    report: str
    results_path: str


@dataclass(frozen=True)
class Promotion:
    colour: str
    previous: str | None
    answered: tuple[str, ...]            # production endpoints that served the check request
    baseline: str = ""                   # the baseline document this promotion recorded
    answered_at: float = 0.0             # epoch seconds: production answered from this colour


@dataclass(frozen=True)
class Retired:
    colour: str
    kept_s: int
    deleted: tuple[str, ...]
    skipped: str = ""                    # why nothing was deleted, when that was decided


@dataclass(frozen=True)
class RoleRolled:
    """One role of the live colour replaced in place (a rolling update's step, or its revert)."""
    role: str
    from_revision: str
    to_revision: str
    seconds: float                       # apply (or the restart) -> the role Ready and listed by the router
    phases_s: dict[str, float]


@dataclass(frozen=True)
class RolledBack:
    colour: str
    deleted: tuple[str, ...]
    why: str = ""


@dataclass(frozen=True)
class GateResult:
    outcome: str                         # "promoted" (a candidate that is not promoted raises)
    decision: str
    gate: GateVerdict
    promotion: Promotion | None = None
    retired: Retired | None = None


@dataclass(frozen=True)
class TornDown:
    released: int


@dataclass(frozen=True)
class Handover:
    """In the ledger of a run whose fleet a ``fleet`` update replaces (``tasks.planning.fleet_swap``):
    the second fleet's run, its candidate colour, and how far the swap got."""
    successor: str                       # the second fleet's run id
    colour: str                          # the candidate colour, on the second fleet
    previous_colour: str                 # the live colour, on this run's fleet
    phase: str                           # building | switched | released | abandoned
    note: str = ""                       # why it was abandoned; what the release freed


StageRecord = Union[Reserved, Fleet, FabricVerdict, StagedWeights, Deployed, GateResult, TornDown, Handover]

# Pipeline order first; handover (a fleet update replacing the run's fleet) and teardown are no
# pipeline stages: each ends what the run holds.
STAGE_TYPES: dict[str, type] = {"reserve": Reserved, "launch": Fleet, "fabric": FabricVerdict,
                                "weights": StagedWeights, "deploy": Deployed, "benchmark": GateResult,
                                "handover": Handover, "teardown": TornDown}
PIPELINE: tuple[str, ...] = ("reserve", "launch", "fabric", "weights", "deploy", "benchmark")


def identity(record: StageRecord) -> tuple:
    """What a record is about: the resources later stages were done on. Recording a stage again
    with the same identity (an adopted reservation, the same fleet) leaves later stages done."""
    if isinstance(record, Reserved):
        return (record.reservation_id,)
    if isinstance(record, Fleet):
        return tuple(sorted(record.instance_ids()))
    if isinstance(record, FabricVerdict):
        return (record.passed, *sorted(record.fleet.instance_ids()))
    if isinstance(record, Deployed):
        return (record.colour, record.generation)
    if isinstance(record, StagedWeights):
        return ()  # new bytes on the NVMe do not undo a candidate that already loaded its model
    return (id(record),)  # the last stage, and teardown: nothing after them to keep or drop


def stage_of(record: object) -> str:
    for stage, kind in STAGE_TYPES.items():
        if type(record) is kind:
            return stage
    raise TypeError(f"not a stage record: {type(record).__name__}")


# --- the serializer -------------------------------------------------------------------------


def to_dict(record: object) -> dict:
    """Plain JSON-able data (tuples become lists); ``from_dict(type(record), ...)`` reverses it."""
    if not dataclasses.is_dataclass(record) or isinstance(record, type):
        raise TypeError(f"not a record: {type(record).__name__}")
    return dataclasses.asdict(record)


def from_dict(kind: type, data: Any):
    """The ``kind`` record from ``to_dict`` output; unknown keys are refused, missing ones take
    their defaults. Raises ValueError naming the field when the data does not fit."""
    return _value(kind, data, kind.__name__)


def record_for(stage: str, data: dict) -> StageRecord:
    if stage not in STAGE_TYPES:
        raise ValueError(f"unknown stage {stage!r} (known: {', '.join(STAGE_TYPES)})")
    return from_dict(STAGE_TYPES[stage], data)


def _value(hint: Any, data: Any, where: str):
    if hint is Any:
        return data
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        if data is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        if len(options) == 1:
            return _value(options[0], data, where)
        return data  # plain scalars only (str | int ...): JSON already gave the right one
    if dataclasses.is_dataclass(hint):
        return _record(hint, data, where)
    if origin is tuple:
        if not isinstance(data, (list, tuple)):
            raise ValueError(f"{where}: expected a list, got {type(data).__name__}")
        item = args[0] if args else Any
        return tuple(_value(item, v, f"{where}[{i}]") for i, v in enumerate(data))
    if origin is dict:
        if not isinstance(data, dict):
            raise ValueError(f"{where}: expected a mapping, got {type(data).__name__}")
        value_hint = args[1] if len(args) == 2 else Any
        return {k: _value(value_hint, v, f"{where}.{k}") for k, v in data.items()}
    if hint is float and isinstance(data, int) and not isinstance(data, bool):
        return float(data)
    if hint in (str, int, float, bool) and not isinstance(data, hint):
        raise ValueError(f"{where}: expected {hint.__name__}, got {type(data).__name__}")
    return data


def _record(kind: type, data: Any, where: str):
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(kind)
    names = {f.name for f in dataclasses.fields(kind) if f.init}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {', '.join(unknown)}")
    values = {name: _value(hints[name], data[name], f"{where}.{name}") for name in names if name in data}
    try:
        return kind(**values)
    except TypeError as e:  # a required field is missing
        raise ValueError(f"{where}: {e}") from None

