"""A real OpenSSH sshd for tests: key auth only, generated keys, loopback addresses, stopped by PID.

Used by the SSH adapter tests and, until the sandbox NodeManager fixtures exist, as the nodes
of the staging tests. One sshd can listen on many 127.0.0.x addresses (one "node" each).
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from sandbox.s3 import free_port

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def keygen(path: Path, kind: str = "ed25519") -> str:
    """Write a key pair at path (+ .pub); returns the public line 'TYPE BASE64'."""
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", "", "-f", str(path)], check=True)
    return " ".join(Path(f"{path}.pub").read_text().split()[:2])


@dataclass
class Sshd:
    root: Path
    addresses: list[str]
    port: int
    client_key: Path
    host_key_line: str
    process: subprocess.Popen | None = None
    extra: str = ""
    max_sessions: int = 64  # sessions on one connection; OpenSSH's default is 10

    @property
    def user(self) -> str:
        return getpass.getuser()

    @classmethod
    def create(cls, root: Path, addresses: list[str], port: int | None = None, extra: str = "",
               client_key: Path | None = None, max_sessions: int = 64) -> "Sshd":
        root.mkdir(parents=True, exist_ok=True)
        host_key = root / "host_ed25519"
        host_line = keygen(host_key)
        if client_key is None:
            client_key = root / "id_ed25519"
            keygen(client_key)
        (root / "authorized_keys").write_text(Path(f"{client_key}.pub").read_text())
        os.chmod(root / "authorized_keys", 0o600)
        return cls(root, addresses, port or free_port(addresses[0]), client_key, host_line, extra=extra,
                   max_sessions=max_sessions)

    def config(self) -> str:
        listen = "\n".join(f"ListenAddress {a}:{self.port}" for a in self.addresses)
        return f"""{listen}
HostKey {self.root / 'host_ed25519'}
PidFile {self.root / 'sshd.pid'}
AuthorizedKeysFile {self.root / 'authorized_keys'}
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
MaxStartups 200
MaxSessions {self.max_sessions}
AllowTcpForwarding yes
LogLevel ERROR
Subsystem sftp internal-sftp
{self.extra}
"""

    def start(self, timeout_s: float = 10.0) -> "Sshd":
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)
        cfg = self.root / "sshd_config"
        cfg.write_text(self.config())
        log = open(self.root / "sshd.log", "ab")
        self.process = subprocess.Popen([SSHD, "-D", "-e", "-f", str(cfg)], stdout=log, stderr=log,
                                        stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"sshd exited: {(self.root / 'sshd.log').read_text()[-500:]}")
            try:
                with socket.create_connection((self.addresses[-1], self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("sshd did not start listening")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.process = None
