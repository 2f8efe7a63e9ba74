"""What runs on the node around a command: environment over stdin, its own process group, a kill.

``wrap(argv)`` is the command line sent to sshd: a short POSIX sh script plus the argument
list, every word shlex-quoted, so the remote shell sees exactly the argv given and nothing
else runs. The script

1. reads ``export NAME='value'`` lines from stdin up to a one-off marker and evals them, so
   secrets reach the command's environment without sitting on any command line (visible in
   ``ps``) and without sshd's AcceptEnv, which is usually restricted to LANG/LC_*;
2. starts the command under ``setsid`` (a new session and process group) and reports the group
   id on stderr as ``pdlift-pgid N``, then hands it the rest of stdin;
3. waits and exits with the command's status.

On timeout the adapter runs ``KILL_GROUP`` over a second channel (``kill -SIG -PGID``: dash's
kill builtin takes no ``--``): SIGTERM to the group, SIGKILL
after 3 s, then exits 0 only if no live process of that group is left (zombies are ignored:
a container's PID 1 may never reap them).
"""

from __future__ import annotations

import re
import shlex
import uuid
from collections import deque
from collections.abc import Callable

PGID_PREFIX = "pdlift-pgid "
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

WRAPPER = r"""m=$1; shift
s=
while IFS= read -r l; do [ "$l" = "$m" ] && break; s="$s$l
"; done
eval "$s"
unset s l m
exec 3<&0
setsid sh -c 'echo "pdlift-pgid $$" >&2; exec "$@"' pdlift "$@" 0<&3 3<&- &
exec 3<&-
wait $!"""

KILL_GROUP = r"""g=$1
alive() {
  for f in /proc/[0-9]*/stat; do
    { IFS= read -r l < "$f"; } 2>/dev/null || continue
    set -- ${l##*) }
    [ "$3" = "$g" ] && [ "$1" != Z ] && return 0
  done
  return 1
}
kill -TERM "-$g" 2>/dev/null
i=0; while alive && [ $i -lt 30 ]; do sleep 0.1; i=$((i+1)); done
kill -KILL "-$g" 2>/dev/null
i=0; while alive && [ $i -lt 30 ]; do sleep 0.1; i=$((i+1)); done
! alive"""


def wrap(argv: list[str]) -> tuple[str, str]:
    """(command line for sshd, stdin marker). ``argv`` is a list: never a shell string."""
    if isinstance(argv, str) or not argv or not all(isinstance(a, str) for a in argv):
        raise TypeError("remote commands are argument lists of str, never shell strings")
    marker = f"pdlift-env-{uuid.uuid4().hex}"
    return shlex.join(["sh", "-c", WRAPPER, "pdlift-run", marker, *argv]), marker


def env_block(env: dict[str, str] | None, marker: str) -> bytes:
    """The stdin prefix the wrapper evals: quoted exports, then the marker line."""
    lines = []
    for name, value in (env or {}).items():
        if not _ENV_NAME.match(name):
            raise ValueError(f"not an environment variable name: {name!r}")
        lines.append(f"export {name}={shlex.quote(value)}")
    return ("\n".join(lines + [marker]) + "\n").encode()


def kill_command(pgid: int) -> str:
    return shlex.join(["sh", "-c", KILL_GROUP, "pdlift-kill", str(int(pgid))])


class Redactor:
    """Replaces every secret value with ``***`` (longest first, so overlaps redact fully)."""

    def __init__(self, secrets: list[str]):
        self._secrets = sorted({s for s in secrets if len(s) >= 4}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for s in self._secrets:
            if s in text:
                text = text.replace(s, "***")
        return text


class LineReader:
    """Splits stdout/stderr bytes into lines, redacts them, forwards them, keeps a bounded tail."""

    def __init__(self, on_line: Callable[[str, str], None] | None, redact: Redactor,
                 keep_lines: int = 20000):
        self._on_line, self._redact = on_line, redact
        self._partial = {"stdout": b"", "stderr": b""}
        self.lines = {"stdout": deque(maxlen=keep_lines), "stderr": deque(maxlen=keep_lines)}
        self.pgid: int | None = None

    def feed(self, stream: str, data: bytes) -> None:
        buf = self._partial[stream] + data
        *complete, self._partial[stream] = buf.split(b"\n")
        for raw in complete:
            self._line(stream, raw)

    def close(self) -> None:
        for stream, rest in self._partial.items():
            if rest:
                self._line(stream, rest)
            self._partial[stream] = b""

    def _line(self, stream: str, raw: bytes) -> None:
        text = self._redact(raw.decode("utf-8", "replace").rstrip("\r"))
        if stream == "stderr" and self.pgid is None and text.startswith(PGID_PREFIX):
            self.pgid = int(text[len(PGID_PREFIX):].strip() or 0) or None
            return
        self.lines[stream].append(text)
        if self._on_line is not None:
            self._on_line(stream, text)

    def text(self, stream: str) -> str:
        return "\n".join(self.lines[stream])

    def tail(self, stream: str, n: int = 5) -> str:
        return "\n".join(list(self.lines[stream])[-n:])
