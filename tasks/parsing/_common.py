"""Helpers shared by the tool-output parsers: launcher prefixes, strict numbers, JSON-able dicts.

Every parser in this package promises one thing to its callers: on input it cannot read it
raises ``tasks.errors.ParseError`` and nothing else. The helpers here raise ParseError
themselves, so a parser built from them cannot leak a ValueError or IndexError.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import re
from collections.abc import Iterator
from typing import Any

from tasks.errors import ParseError

# Launchers tag each output line with where it came from:
#   srun --label / mpirun -l     "0: "
#   Open MPI --tag-output        "[1,0]<stdout>:" (Open MPI 5 adds a space)
#   the modal health-check glue  "[rank 1] "
_PREFIX = re.compile(
    r"^(?:\s*(?P<label>\d{1,6}):(?=\s|$)\s?"
    r"|\[(?P<ompi>\d{1,9},\d{1,9})\]<std(?:out|err)>:\s?"
    r"|\[(?P<rank>rank\s+\d{1,6})\]\s?)"
)
_MAX_PREFIXES = 4  # nested launchers (srun inside mpirun) stack at most a few tags

# Hard limits keep a hostile or runaway file from costing unbounded memory or time.
MAX_INPUT_CHARS = 64 * 1024 * 1024
MAX_KEPT_LINES = 200  # warnings and similar free-text lines kept as evidence


def split_prefixes(line: str) -> tuple[str | None, str]:
    """(the outermost launcher tag: '0', '1,0' or 'rank 1', or None; the line without any tags)."""
    tag = None
    for _ in range(_MAX_PREFIXES):
        m = _PREFIX.match(line)
        if not m or m.end() == 0:
            break
        if tag is None:
            tag = m["label"] or m["ompi"] or m["rank"]
        line = line[m.end():]
    return tag, line


def strip_prefixes(line: str) -> str:
    """The line without launcher tags (rank labels), however many are stacked."""
    return split_prefixes(line)[1]


def check_text(text: object, tool: str) -> str:
    """Reject what is not text, or too large to be a tool's output."""
    if not isinstance(text, str):
        raise ParseError(f"{tool}: expected text, got {type(text).__name__}")
    if len(text) > MAX_INPUT_CHARS:
        raise ParseError(f"{tool}: output is {len(text)} characters, more than {MAX_INPUT_CHARS}")
    return text


def numbered_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) for the lines of ``text``, numbered by newline as ``grep -n``,
    ``sed -n Np`` and editors number them: what a ParseError's "line N" must point at.

    The lines are still those of ``str.splitlines()``, which also breaks at \\r, \\v, \\f,
    \\x1c-\\x1e, \\x85, \\u2028 and \\u2029: numbering its lines directly put every line after
    such a character off by one (found by tests/unit/parsing/test_parse_errors_name_the_line.py).
    The pieces of one newline-separated line share its number; a blank line (and the end after
    a final newline) comes out as one empty line, which every parser skips.
    """
    for number, physical in enumerate(text.split("\n"), 1):
        for line in physical.splitlines() or [physical]:
            yield number, line


_INT = re.compile(r"^[+-]?\d{1,20}$", re.ASCII)
_FLOAT = re.compile(r"^[+-]?(?:\d{1,40}(?:\.\d*)?|\.\d{1,40})(?:[eE][+-]?\d{1,3})?$", re.ASCII)
_NAN = re.compile(r"^[+-]?(?:nan|inf)$", re.IGNORECASE)


def to_int(token: str, what: str, where: str = "") -> int:
    if not _INT.match(token):
        raise ParseError(f"{where}{what}: {token!r} is not an integer")
    return int(token)


def to_float(token: str, what: str, where: str = "", *, allow_nan: bool = False) -> float:
    """A decimal number; 'nan'/'inf' only when the tool is known to print them."""
    if _FLOAT.match(token):
        return float(token)
    if allow_nan and _NAN.match(token):
        return float(token)
    raise ParseError(f"{where}{what}: {token!r} is not a number")


def is_int(token: str) -> bool:
    return bool(_INT.match(token))


def is_number(token: str) -> bool:
    return bool(_FLOAT.match(token) or _NAN.match(token))


def jsonable(value: Any) -> Any:
    """Dataclasses, enums and tuples as plain JSON types; NaN and infinities become None."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, frozenset, set)):
        items = sorted(value) if isinstance(value, (set, frozenset)) else value
        return [jsonable(v) for v in items]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
