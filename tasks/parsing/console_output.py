"""SSH host keys in an EC2 console log (GetConsoleOutput), as cloud-init prints them. Pure.

cloud-init prints the instance's public host keys between ``-----BEGIN SSH HOST KEY KEYS-----``
and ``-----END SSH HOST KEY KEYS-----`` on the serial console. Those lines are what a node is
pinned to (``tasks.adapters.ssh_hostkeys``).
"""

from __future__ import annotations

import re

BEGIN, END = "-----BEGIN SSH HOST KEY KEYS-----", "-----END SSH HOST KEY KEYS-----"
_KEY_LINE = re.compile(r"(?:^|\s)((?:ssh|ecdsa|sk)-[a-z0-9@.\-]+)\s+([A-Za-z0-9+/=]{20,})(?:\s|$)")


def parse_console_output(text: str) -> list[str]:
    """The ``TYPE BASE64`` host key lines of the last key block in a console log.

    Console logs carry prefixes (timestamps, ``ec2:``) and may repeat the block after a reboot;
    the last complete block wins. Returns [] when there is none yet (cloud-init not done).
    """
    blocks, current = [], None
    for raw in text.splitlines():
        if BEGIN in raw:
            current = []
        elif END in raw and current is not None:
            blocks.append(current)
            current = None
        elif current is not None and (m := _KEY_LINE.search(raw)):
            current.append(f"{m.group(1)} {m.group(2)}")
    return blocks[-1] if blocks else []
