"""The Prometheus text exposition format (0.0.4), as engines' /metrics endpoints serve it. Pure.

The format: docs/sources.md#prometheus-text-format.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


# name{label="value",...} value [timestamp]
_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def parse_prometheus(text: str) -> list[Sample]:
    """Samples of the Prometheus text exposition format (0.0.4); comments and junk are skipped."""
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            continue
        labels = {k: re.sub(r'\\[\\"n]', lambda x: _UNESCAPE[x.group(0)], v)
                  for k, v in _LABEL.findall(m.group(3) or "")}
        try:
            value = float(m.group(4))
        except ValueError:
            continue
        out.append(Sample(m.group(1), labels, value))
    return out
