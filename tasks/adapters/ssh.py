"""SSH to GPU nodes (paramiko, sync): pinned host keys, key auth, commands that cannot outlive
their timeout, output streamed line by line, and bounded fan-out across many nodes.

    NodeShell(settings).run(node, ["nvidia-smi", "-L"], timeout_s=30, on_line=log)
    run_on_all(nodes, lambda n: shell.run(n, argv, timeout_s=60), max_parallel=32)

Contracts:
- Host keys are pinned (console output lines on ``SshNode.host_keys``, plus the operator's
  known_hosts); an unknown or changed key raises ``HostKeyMismatch`` and nothing is sent.
- Commands are argument lists, shlex-quoted into one line (see ``ssh_exec``); environment values
  travel on stdin, never on a command line, and are redacted from every line, log and error.
- On timeout the command's whole process group is killed and ``RemoteCommandTimeout`` says
  whether anything survived. A non-zero exit raises ``RemoteCommandFailed`` (unless check=False).
- Refused, reset or silent connections are retried a bounded number of times, then raise
  ``RemoteUnavailable``; a rejected key raises ``RequestRejected``. A session that a live
  connection refuses (sshd's MaxSessions) or is slow to open runs on a connection of its own: the
  shared one, and every command on it, goes on. Every error keeps its cause;
  ``ssh_errors`` is the one translation of paramiko's exceptions.
"""

from __future__ import annotations

import os
import shlex
import stat
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass

import paramiko

from tasks.adapters import ssh_errors, ssh_exec
from tasks.adapters.ssh_connect import Connector, SshNode, SshSettings
from tasks.errors import RemoteCommandFailed, RemoteCommandTimeout, RemoteUnavailable

__all__ = ["CommandResult", "NodeShell", "Outcome", "SshNode", "SshSettings", "run_on_all"]

OnLine = Callable[[str, str], None]  # (stream: "stdout" | "stderr", line)


@dataclass(frozen=True)
class CommandResult:
    node: str
    command: str
    exit_code: int
    stdout: str
    stderr: str
    seconds: float


@dataclass(frozen=True)
class Outcome:
    node: SshNode
    value: object = None
    error: BaseException | None = None


class NodeShell:
    """Connections to many nodes, one cached transport each (thread-safe). Close when done."""

    def __init__(self, settings: SshSettings):
        self.settings = settings
        self._connector = Connector(settings)
        self._clients: dict[tuple[str, int], paramiko.SSHClient] = {}
        self._locks: dict[tuple[str, int], threading.Lock] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> "NodeShell":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for c in clients:
            c.close()
        self._connector.close()

    # --- commands ----------------------------------------------------------------------

    def run(self, node: SshNode, argv: list[str], *, timeout_s: float, env: dict[str, str] | None = None,
            stdin: bytes = b"", on_line: OnLine | None = None, check: bool = True,
            secrets: list[str] | None = None) -> CommandResult:
        """Run ``argv`` on ``node``; stream its lines to ``on_line``; kill its group on timeout.

        ``secrets`` are redacted from every line and error; by default every ``env`` value.
        """
        command, marker = ssh_exec.wrap(argv)
        shown = shlex.join(argv)
        redact = ssh_exec.Redactor(list((env or {}).values()) if secrets is None else secrets)
        reader = ssh_exec.LineReader(on_line, redact)
        payload = ssh_exec.env_block(env, marker) + stdin
        start = time.monotonic()
        chan, own_connection = self._exec(node, command)
        try:
            code = self._pump(chan, payload, reader, start + timeout_s)
            if code is None:
                cleaned = self._kill_group(node, reader.pgid)
                raise RemoteCommandTimeout(
                    f"{node.label}: `{redact(shown)}` ran past {timeout_s:g} s; " + (
                        f"killed its process group {reader.pgid}" if cleaned else
                        "could not confirm its processes are gone: check the node"),
                    node=node.name, cleaned_up=cleaned)
        except (paramiko.SSHException, OSError, EOFError) as e:
            self._forget(node)
            raise ssh_errors.translate(e, f"{node.label}: connection lost while running `{redact(shown)}`") from e
        finally:
            chan.close()
            if own_connection is not None:
                own_connection.close()
        result = CommandResult(node.name, shown, code, reader.text("stdout"), reader.text("stderr"),
                               time.monotonic() - start)
        if check and code != 0:
            raise RemoteCommandFailed(f"{node.label}: `{redact(shown)}` exited {code}: "
                                      f"{reader.tail('stderr') or reader.tail('stdout')}",
                                      node=node.name, exit_code=code)
        return result

    def _exec(self, node: SshNode, command: str) -> tuple[paramiko.Channel, paramiko.SSHClient | None]:
        """A session running ``command``, and the connection to close after it when that is not
        the node's shared one (None: it is)."""
        for attempt in (1, 2):  # a cached transport may have died since: reconnect once
            client = self._client(node)
            transport = client.get_transport()
            try:
                chan = transport.open_session(timeout=self.settings.connect_timeout_s)
                chan.exec_command(command)
                return chan, None
            except (paramiko.SSHException, OSError, EOFError, AttributeError) as e:
                if transport is not None and transport.is_active():
                    # The connection lives but refused this session (sshd's MaxSessions: "open
                    # failed") or did not open it in time (a loaded node). Closing it would end
                    # every other command on it: paramiko closes their channels, which then read as
                    # exit -1 (a healthy NIC's loopback judged ISOLATE). This one gets its own.
                    return self._exec_alone(node, command)
                self._forget(node)
                if attempt == 2:
                    # AttributeError: the cached client had no transport left (closed under us)
                    cause = e if not isinstance(e, AttributeError) else EOFError(str(e))
                    raise ssh_errors.translate(cause, f"{node.label}: could not open an SSH session") from e
        raise AssertionError("unreachable")

    def _exec_alone(self, node: SshNode, command: str) -> tuple[paramiko.Channel, paramiko.SSHClient]:
        """``command`` on a connection of its own, which the caller closes after it."""
        client = self._connector.connect(node)
        try:
            chan = client.get_transport().open_session(timeout=self.settings.connect_timeout_s)
            chan.exec_command(command)
            return chan, client
        except (paramiko.SSHException, OSError, EOFError) as e:
            client.close()
            raise ssh_errors.translate(e, f"{node.label}: could not open an SSH session") from e

    @staticmethod
    def _pump(chan: paramiko.Channel, payload: bytes, reader: ssh_exec.LineReader,
              deadline: float) -> int | None:
        """Send stdin, read both streams until exit; None when the deadline passed first."""
        sent, idle = 0, 0.001
        while True:
            busy = False
            if sent < len(payload) and chan.send_ready():
                sent += chan.send(payload[sent:sent + 32768])
                busy = True
                if sent >= len(payload):
                    chan.shutdown_write()
            while chan.recv_ready():
                reader.feed("stdout", chan.recv(65536))
                busy = True
            while chan.recv_stderr_ready():
                reader.feed("stderr", chan.recv_stderr(65536))
                busy = True
            if chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready():
                reader.close()
                return chan.recv_exit_status()
            if time.monotonic() > deadline:
                reader.close()
                return None
            idle = 0.001 if busy else min(idle * 2, 0.02)
            if not busy:
                time.sleep(idle)

    def _kill_group(self, node: SshNode, pgid: int | None) -> bool:
        """Kill ``pgid`` on a connection of its own: the shared one may be at sshd's MaxSessions
        (10 by default), and a timed-out session keeps its slot until its processes exit, so a
        session opened there would be refused, and dropping that connection would cut off every
        other command on it."""
        if not pgid:
            return False
        try:
            client = self._connector.connect(node)
        except (RemoteUnavailable, paramiko.SSHException, OSError, EOFError):
            return False
        try:
            chan = client.get_transport().open_session(timeout=self.settings.connect_timeout_s)
            chan.exec_command(ssh_exec.kill_command(pgid))
            reader = ssh_exec.LineReader(None, ssh_exec.Redactor([]))
            chan.shutdown_write()
            return self._pump(chan, b"", reader, time.monotonic() + 15) == 0
        except (paramiko.SSHException, OSError, EOFError, AttributeError):
            return False
        finally:
            client.close()

    def upload(self, node: SshNode, local_path: str, remote_path: str, mode: int = 0o644,
               timeout_s: float = 120.0) -> None:
        """Copy one file over SFTP (relative remote paths are under the login directory)."""
        client = self._client(node)
        try:
            with client.open_sftp() as sftp:
                sftp.get_channel().settimeout(timeout_s)  # a stalled transfer raises, never hangs
                _sftp_makedirs(sftp, os.path.dirname(remote_path))
                # Write aside, then rename: a reader (another session) never sees half a file.
                partial = f"{remote_path}.{uuid.uuid4().hex[:8]}.part"
                sftp.put(local_path, partial)
                sftp.chmod(partial, mode)
                sftp.posix_rename(partial, remote_path)
        except (paramiko.SSHException, OSError, EOFError) as e:
            error = ssh_errors.translate(e, f"{node.label}: cannot upload {os.path.basename(local_path)} to "
                                            f"{remote_path}", sftp=True)
            if isinstance(error, RemoteUnavailable):
                self._forget(node)
            raise error from e

    # --- connections ---------------------------------------------------------------------

    def _client(self, node: SshNode) -> paramiko.SSHClient:
        ident = (node.address, node.port or self.settings.port)
        with self._lock:
            lock = self._locks.setdefault(ident, threading.Lock())
        with lock:
            client = self._clients.get(ident)
            if client is not None and client.get_transport() and client.get_transport().is_active():
                return client
            client = self._connector.connect(node)
            with self._lock:
                self._clients[ident] = client
            return client

    def _forget(self, node: SshNode) -> None:
        with self._lock:
            client = self._clients.pop((node.address, node.port or self.settings.port), None)
        if client is not None:
            client.close()

def run_on_all(nodes: list[SshNode], fn: Callable[[SshNode], object], *, max_parallel: int,
               on_tick: Callable[[], None] | None = None, tick_s: float = 1.0) -> list[Outcome]:
    """``fn(node)`` for every node, at most ``max_parallel`` at once; outcomes in node order.

    Errors are collected per node, never raised here: the caller decides what a failed node
    means. ``on_tick`` runs on the calling thread about every ``tick_s`` (progress artifacts).
    """
    outcomes: dict[int, Outcome] = {}
    with ThreadPoolExecutor(max_workers=max(1, min(max_parallel, len(nodes))),
                            thread_name_prefix="pdlift-ssh") as pool:
        futures = {pool.submit(fn, n): i for i, n in enumerate(nodes)}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=tick_s, return_when=FIRST_COMPLETED)
            for f in done:
                i = futures[f]
                err = f.exception()
                outcomes[i] = Outcome(nodes[i], None if err else f.result(), err)
            if on_tick is not None:
                on_tick()
    return [outcomes[i] for i in range(len(nodes))]


def _sftp_makedirs(sftp: paramiko.SFTPClient, path: str) -> None:
    parts, current = [p for p in path.split("/") if p], "/" if path.startswith("/") else ""
    for part in parts:
        current = f"{current}{part}/"
        try:
            sftp.stat(current)
        except FileNotFoundError:
            try:
                sftp.mkdir(current)
            except OSError:
                # Another session made it between the stat and the mkdir: OpenSSH's sftp-server
                # answers that with a bare SSH_FX_FAILURE ("Failure"), not "already exists".
                if not _is_dir(sftp, current):
                    raise


def _is_dir(sftp: paramiko.SFTPClient, path: str) -> bool:
    try:
        return stat.S_ISDIR(sftp.stat(path).st_mode or 0)
    except FileNotFoundError:
        return False
