"""Engine command lines: rendered as ``/bin/sh -c 'exec ...'`` and read back for the invariants.

Why a shell: the LWS variables need arithmetic (``--data-parallel-start-rank
$((LWS_WORKER_INDEX*8))``), which Kubernetes' ``$(VAR)`` expansion cannot do; ``exec`` keeps
the engine as PID 1 so SIGTERM reaches it and ``--shutdown-timeout`` can drain. One flag per
line keeps the golden files reviewable.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass


@dataclass(frozen=True)
class Sh:
    """A token the shell must expand (left unquoted on purpose)."""

    text: str


Token = str | Sh
Line = tuple[Token, ...]


def _quote(token: Token) -> str:
    return token.text if isinstance(token, Sh) else shlex.quote(token)


def script(lines: list[Line]) -> str:
    return "exec " + " \\\n  ".join(" ".join(_quote(t) for t in line) for line in lines) + "\n"


def container_command(lines: list[Line]) -> dict:
    return {"command": ["/bin/sh", "-c"], "args": [script(lines)]}


def argv(container: dict) -> list[str]:
    """The engine's argv as the shell would pass it (variables left as ``$NAME``)."""
    command, args = list(container.get("command") or []), list(container.get("args") or [])
    if command and command[-1] == "-c":
        text = (args[0] if args else "").replace("\\\n", " ")
        tokens = shlex.split(text)
        return tokens[1:] if tokens[:1] == ["exec"] else tokens
    return command + args


def flags(tokens: list[str]) -> dict[str, list[str]]:
    """``--flag value...`` and ``--flag=value``; the last occurrence wins, as with argparse."""
    out: dict[str, list[str]] = {}
    current: str | None = None
    for tok in tokens:
        if tok.startswith("--"):
            name, eq, value = tok.partition("=")
            current = name.replace("_", "-")
            out[current] = [value] if eq else []
        elif current is not None:
            out[current].append(tok)
    return out


def positionals(tokens: list[str]) -> list[str]:
    """Tokens before the first flag (``vllm serve MODEL`` -> ["vllm", "serve", "MODEL"])."""
    out = []
    for tok in tokens:
        if tok.startswith("--"):
            break
        out.append(tok)
    return out


def repeated(tokens: list[str], flag: str) -> list[list[str]]:
    """Every occurrence of a repeatable flag with its values (router ``--prefill URL PORT``)."""
    out: list[list[str]] = []
    current: list[str] | None = None
    for tok in tokens:
        if tok.startswith("--"):
            current = None
            if tok == flag:
                current = []
                out.append(current)
        elif current is not None:
            current.append(tok)
    return out
