"""Parse ``fi_info -p efa -t FI_EP_RDM`` (libfabric's default, non-verbose listing).

Each entry is a ``provider: NAME`` line followed by indented ``fabric``, ``domain``,
``version``, ``type`` and ``protocol`` lines. A p5en lists 16 ``rdmapXXsY-rdm`` domains; since
libfabric 2.x each device shows up twice, under the ``efa-direct`` fabric first and then
``efa`` (ofiwg/libfabric PR #10735), so devices are counted by distinct domain. When nothing
matches, fi_info prints ``fi_getinfo: -61`` (on stderr, exit code 61). Raises only ParseError.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tasks.errors import ParseError
from tasks.parsing._common import check_text, jsonable, numbered_lines

_PROVIDER = re.compile(r"^provider:\s*(?P<v>\S+)\s*$")
_FIELD = re.compile(r"^\s+(?P<k>[a-z_]+):\s*(?P<v>.*?)\s*$")
_NO_MATCH = re.compile(r"^fi_getinfo:\s*(?P<code>-?\d+)(?:\s*\((?P<msg>.*)\))?\s*$")
_LOG_LINE = re.compile(r"^libfabric:\d+:")  # FI_LOG_LEVEL output, when stderr is merged
_KEYS = {"fabric", "domain", "version", "type", "protocol"}
_MAX_ENTRIES = 4096
_ENDPOINT_SUFFIXES = ("-rdm", "-dgrm")


@dataclass(frozen=True)
class FiInfoEntry:
    provider: str
    fabric: str | None = None
    domain: str | None = None
    version: str | None = None
    ep_type: str | None = None
    protocol: str | None = None

    @property
    def core_provider(self) -> str:
        """'tcp' for the utility-layered 'tcp;ofi_rxm'."""
        return self.provider.split(";", 1)[0]

    @property
    def device(self) -> str | None:
        """The NIC behind the domain: 'rdmap16s27' for 'rdmap16s27-rdm'."""
        if self.domain is None:
            return None
        for suffix in _ENDPOINT_SUFFIXES:
            if self.domain.endswith(suffix):
                return self.domain[: -len(suffix)]
        return self.domain


@dataclass(frozen=True)
class FiInfoResult:
    entries: tuple[FiInfoEntry, ...]
    error: str | None = None  # 'fi_getinfo: -61 (No data available)': nothing matched

    def _matching(self, provider: str, ep_type: str | None) -> list[FiInfoEntry]:
        return [e for e in self.entries if e.core_provider == provider
                and (ep_type is None or e.ep_type == ep_type)]

    def domains(self, provider: str = "efa", ep_type: str | None = "FI_EP_RDM") -> tuple[str, ...]:
        """Distinct domain names, in listing order."""
        return tuple(dict.fromkeys(e.domain for e in self._matching(provider, ep_type) if e.domain))

    def devices(self, provider: str = "efa", ep_type: str | None = "FI_EP_RDM") -> tuple[str, ...]:
        """Distinct NICs (domains without their endpoint suffix), in listing order."""
        return tuple(dict.fromkeys(e.device for e in self._matching(provider, ep_type) if e.device))

    def device_count(self, provider: str = "efa") -> int:
        return len(self.devices(provider))

    def fabrics(self, provider: str = "efa") -> tuple[str, ...]:
        """Distinct fabric names in listing order: ('efa-direct', 'efa') on libfabric 2.x."""
        return tuple(dict.fromkeys(e.fabric for e in self._matching(provider, None) if e.fabric))


def parse_fi_info(text: str) -> FiInfoResult:
    text = check_text(text, "fi_info")
    entries: list[dict[str, str]] = []
    error = None
    for lineno, raw in numbered_lines(text):
        line = raw.rstrip()
        if not line.strip() or _LOG_LINE.match(line):
            continue
        if (m := _PROVIDER.match(line)):
            if len(entries) >= _MAX_ENTRIES:
                raise ParseError(f"fi_info: more than {_MAX_ENTRIES} entries")
            entries.append({"provider": m["v"]})
        elif (m := _FIELD.match(line)) and entries:
            key = m["k"]
            if key in _KEYS:
                entries[-1].setdefault("ep_type" if key == "type" else key, m["v"])
        elif (m := _NO_MATCH.match(line.strip())):
            error = line.strip()
        else:
            raise ParseError(f"fi_info: line {lineno}: not part of an fi_info listing: {line[:80]!r}")
    if not entries and error is None:
        raise ParseError("fi_info: no provider entries found")
    return FiInfoResult(tuple(FiInfoEntry(**e) for e in entries), error)


def to_json(result: FiInfoResult) -> dict[str, Any]:
    data = jsonable(result)
    data["efa_devices"] = list(result.devices("efa"))
    data["efa_fabrics"] = list(result.fabrics("efa"))
    return data
