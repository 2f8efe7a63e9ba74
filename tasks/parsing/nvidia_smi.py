"""Parse ``nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total,pci.bus_id
--format=csv[,noheader][,nounits]`` and ``nvidia-smi -L``.

With a header the columns are found by name (units in brackets dropped), so any order or
subset works; without one the columns are the query above, in that order. ``[N/A]`` and
``[Not Supported]`` become None. nvidia-smi's own failure messages ('NVIDIA-SMI has failed
because it couldn't communicate with the NVIDIA driver', 'No devices were found') give an
inventory with no GPUs and the message, which the verdict turns into ISOLATE.
Raises only ParseError.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tasks.errors import ParseError
from tasks.parsing._common import check_text, jsonable, numbered_lines, to_int

QUERY_FIELDS = ("index", "name", "uuid", "driver_version", "memory.total", "pci.bus_id")
_LIST = re.compile(r"^GPU\s+(?P<index>\d{1,4}):\s+(?P<name>.+?)\s+\(UUID:\s*(?P<uuid>[^)\s]+)\)\s*$")
_MIG = re.compile(r"^\s+MIG\s+\S+\s+Device\s+\d+:")
_FAILURE = re.compile(r"(NVIDIA-SMI has failed.*|No devices were found.*|Failed to initialize NVML.*"
                      r"|Unable to determine the device handle.*)", re.IGNORECASE)
_MEMORY = re.compile(r"^(?P<n>\d{1,12})(?:\s*(?P<unit>MiB|GiB|KiB|B))?$")
_MISSING = {"[n/a]", "[not supported]", "n/a", "[unknown error]", "[insufficient permissions]"}
_UNIT_MIB = {"KiB": 1 / 1024, "B": 1 / (1 << 20), "MiB": 1, "GiB": 1024, None: 1}
_MAX_GPUS = 1024


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str | None = None
    uuid: str | None = None
    driver_version: str | None = None
    memory_total_mib: int | None = None
    pci_bus_id: str | None = None


@dataclass(frozen=True)
class GpuInventory:
    gpus: tuple[GpuInfo, ...]
    error: str | None = None  # nvidia-smi's own failure message, when it printed one

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(g.name for g in self.gpus if g.name))

    @property
    def driver_versions(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(g.driver_version for g in self.gpus if g.driver_version))


def _value(cell: str) -> str | None:
    cell = cell.strip()
    return None if not cell or cell.lower() in _MISSING else cell


def _memory(cell: str | None, where: str) -> int | None:
    if cell is None:
        return None
    m = _MEMORY.match(cell)
    if not m:
        raise ParseError(f"{where}memory.total: {cell!r} is not a memory size")
    return int(int(m["n"]) * _UNIT_MIB[m["unit"]])


def _gpu(cells: dict[str, str | None], where: str) -> GpuInfo:
    index = cells.get("index")
    if index is None:
        raise ParseError(f"{where}no GPU index")
    return GpuInfo(index=to_int(index, "index", where), name=cells.get("name"),
                   uuid=cells.get("uuid"), driver_version=cells.get("driver_version"),
                   memory_total_mib=_memory(cells.get("memory.total"), where),
                   pci_bus_id=cells.get("pci.bus_id"))


def _column_name(cell: str) -> str:
    """'memory.total [MiB]' -> 'memory.total'."""
    cell = cell.strip()
    if cell.endswith("]") and "[" in cell:
        cell = cell[: cell.rindex("[")].rstrip()
    return cell


def parse_nvidia_smi(text: str) -> GpuInventory:
    """Either output form (CSV query or -L), told apart by its first meaningful line."""
    text = check_text(text, "nvidia-smi")
    # Numbered before the blank lines are dropped: an error's "line N" is the line an editor
    # shows (numbering the non-blank lines put it off by the blank lines above it).
    lines = [(n, ln) for n, ln in numbered_lines(text) if ln.strip()]
    failure = next((m.group(1).strip()[:300] for _, ln in lines if (m := _FAILURE.search(ln))), None)
    if failure is not None:
        return GpuInventory((), failure)
    if not lines:
        raise ParseError("nvidia-smi: empty output")
    if len(lines) > _MAX_GPUS * 8:
        raise ParseError("nvidia-smi: output too long for a GPU listing")
    if _LIST.match(lines[0][1].strip()):
        return GpuInventory(_parse_list(lines))
    return GpuInventory(_parse_csv(lines))


def _quoted(line: str) -> str:
    return repr(line.strip()[:120])


def _parse_list(lines: list[tuple[int, str]]) -> tuple[GpuInfo, ...]:
    gpus = []
    for lineno, line in lines:
        if _MIG.match(line):
            continue
        m = _LIST.match(line.strip())
        if not m:
            raise ParseError(f"nvidia-smi -L: line {lineno}: {_quoted(line)} is not a "
                             "'GPU N: NAME (UUID: ...)' line")
        gpus.append(GpuInfo(index=int(m["index"]), name=m["name"], uuid=m["uuid"]))
    return tuple(gpus)


def _parse_csv(lines: list[tuple[int, str]]) -> tuple[GpuInfo, ...]:
    first = [_column_name(c) for c in lines[0][1].split(",")]
    if "index" in first:
        fields, rows = tuple(first), lines[1:]
    else:
        fields, rows = QUERY_FIELDS, lines
    gpus: list[GpuInfo] = []
    seen: dict[int, int] = {}
    for lineno, line in rows:
        where = f"nvidia-smi: line {lineno}: "
        cells = line.split(",")
        if len(cells) != len(fields):
            raise ParseError(f"{where}expected {len(fields)} columns ({', '.join(fields)}), "
                             f"found {len(cells)} in {_quoted(line)}")
        gpu = _gpu({f: _value(c) for f, c in zip(fields, cells)}, where)
        if gpu.index in seen:
            raise ParseError(f"{where}GPU index {gpu.index} is listed twice (first on line {seen[gpu.index]})")
        seen[gpu.index] = lineno
        gpus.append(gpu)
    return tuple(gpus)


def to_json(result: GpuInventory) -> dict[str, Any]:
    data = jsonable(result)
    data["count"] = len(result.gpus)
    return data
