"""The progress bar of the stage commands that take minutes (`fabric validate`, `launch`, `deploy`).

It shows what the stage's task reports to its progress artifacts (``tasks.progress``), on stderr
as `pdlift stage-weights` shows its own: one line redrawn on a terminal, a line every 10 s
otherwise (a log keeps a trace without filling up), and the last state when the stage ends.
stdout stays the stage's record.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator


class Bar:
    def __init__(self, stream=None, every_s: float = 10.0):
        stream = stream or sys.stderr  # looked up now, not at import: stderr may have been replaced
        self.stream, self.tty, self.every_s = stream, stream.isatty(), every_s
        self.line = ""  # the newest state
        self._written, self._at = "", 0.0

    def __call__(self, stage: str, counts) -> None:
        from tasks.planning.progress import render_bar

        self.line = render_bar(stage, counts)
        now = time.monotonic()
        if self.tty:
            self._write("\r" + self.line + "\x1b[K")  # clear what a longer line left
        elif now - self._at >= self.every_s:
            self._write(self.line + "\n")
        else:
            return
        self._written, self._at = self.line, now

    def close(self) -> None:
        if self.tty and self._written:
            self._write("\n")
        elif not self.tty and self.line != self._written:
            self._write(self.line + "\n")

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()


@contextlib.contextmanager
def progress_bar(stream=None) -> Iterator[Bar]:
    """Show every stage's progress reported in this process while the block runs."""
    from tasks.progress import progress_listener

    bar = Bar(stream)
    try:
        with progress_listener(bar):
            yield bar
    finally:
        bar.close()
