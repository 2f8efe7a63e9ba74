"""Opening SSH connections: who to reach, with which key, pinned to which host keys, and how.

``Connector.connect(node)`` returns a connected paramiko client, directly or through the
bastion (ProxyJump: a direct-tcpip channel over the bastion's own pinned connection). Refused,
reset or silent attempts are retried ``connect_attempts`` times with backoff, then raise
``RemoteUnavailable``; an unknown or changed host key raises ``HostKeyMismatch`` at once; a
rejected client key raises ``RequestRejected`` (``ssh_errors``). Every error keeps its paramiko/socket cause.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import paramiko

from tasks.adapters import ssh_errors
from tasks.adapters.ssh_hostkeys import PinnedKeyPolicy, host_id, parse_key_line
from tasks.errors import ConfigError, HostKeyMismatch


@dataclass(frozen=True)
class SshNode:
    """One node to reach: its name (instance id), address and pinned host key lines."""

    name: str
    address: str
    host_keys: tuple[str, ...] = ()
    port: int | None = None

    @property
    def label(self) -> str:
        return self.name if self.name == self.address else f"{self.name} ({self.address})"


@dataclass(frozen=True)
class SshSettings:
    user: str
    key_file: str
    port: int = 22
    known_hosts: str | None = None
    bastion: str | None = None  # user@host[:port]
    connect_timeout_s: float = 10.0
    max_parallel: int = 32
    connect_attempts: int = 3
    retry_delay_s: float = 0.5
    key_passphrase_env: str | None = None  # the variable the passphrase came from, for messages
    key_passphrase: str | None = field(default=None, repr=False)  # never shown

    @classmethod
    def from_spec(cls, spec, environ=None, **overrides) -> "SshSettings":
        """From a blueprint's ``aws.ssh``; PDLIFT_SSH_KEY_FILE (in ``environ``, default the process's)
        overrides its key_file; an encrypted key's passphrase is read from the variable its
        key_passphrase_env names."""
        environ = os.environ if environ is None else environ
        passphrase_env = spec.key_passphrase_env
        fields = dict(user=spec.user, key_file=environ.get("PDLIFT_SSH_KEY_FILE") or spec.key_file,
                      port=spec.port, known_hosts=spec.known_hosts, bastion=spec.bastion,
                      connect_timeout_s=spec.connect_timeout_s, max_parallel=spec.max_parallel,
                      key_passphrase_env=passphrase_env,
                      key_passphrase=environ.get(passphrase_env) if passphrase_env else None)
        return cls(**{**fields, **overrides})


class Connector:
    def __init__(self, settings: SshSettings):
        self.settings = settings
        self._pkey = load_key(settings.key_file, settings.key_passphrase, settings.key_passphrase_env)
        self._known = paramiko.HostKeys()
        if settings.known_hosts:
            try:
                self._known.load(os.path.expanduser(settings.known_hosts))
            except OSError as e:
                raise ConfigError(f"cannot read known_hosts {settings.known_hosts}: {e.strerror}") from e
        self._lock = threading.Lock()
        self._bastion: paramiko.SSHClient | None = None

    def close(self) -> None:
        with self._lock:
            bastion, self._bastion = self._bastion, None
        if bastion is not None:
            bastion.close()

    def connect(self, node: SshNode) -> paramiko.SSHClient:
        return self._connect(node, node.address, node.port or self.settings.port)

    def _pinned(self, name: str, address: str, port: int, lines: Iterable[str]) -> list[paramiko.PKey]:
        keys = [parse_key_line(line) for line in lines]
        keys += list((self._known.lookup(host_id(address, port)) or {}).values())
        if not keys:
            raise HostKeyMismatch(f"{name}: no pinned host key for {host_id(address, port)} (none in the "
                                  "console output or known_hosts); refusing to connect")
        return keys

    def _connect(self, node: SshNode, address: str, port: int, *, user: str | None = None,
                 jump: bool = True) -> paramiko.SSHClient:
        s = self.settings
        pinned = self._pinned(node.label, address, port, node.host_keys)
        last: BaseException | None = None
        for attempt in range(s.connect_attempts):
            client = paramiko.SSHClient()
            for key in pinned:
                client.get_host_keys().add(host_id(address, port), key.get_name(), key)
            client.set_missing_host_key_policy(PinnedKeyPolicy(pinned))  # unknown or changed keys are refused
            try:
                sock = self._jump(address, port) if s.bastion and jump else None
                client.connect(address, port, username=user or s.user, pkey=self._pkey, sock=sock,
                               timeout=s.connect_timeout_s, banner_timeout=s.connect_timeout_s,
                               auth_timeout=s.connect_timeout_s, channel_timeout=s.connect_timeout_s,
                               allow_agent=False, look_for_keys=False)
                client.get_transport().set_keepalive(15)
                return client
            except HostKeyMismatch:
                client.close()
                raise
            except paramiko.BadHostKeyException as e:
                client.close()
                raise ssh_errors.translate(e, f"{node.label} {host_id(address, port)}") from e
            except (paramiko.SSHException, OSError, EOFError) as e:  # refused, reset, banner or auth timeout
                client.close()
                if isinstance(e, paramiko.AuthenticationException) and not ssh_errors.is_auth_timeout(e):
                    # the key refused: retrying it cannot help (a busy node's slow answer is retried)
                    raise ssh_errors.translate(e, f"{node.label}: user {user or s.user} with key {s.key_file}") from e
                last = e
                if attempt + 1 < s.connect_attempts:
                    time.sleep(s.retry_delay_s * 2 ** attempt)
        raise ssh_errors.translate(last or EOFError("no attempt"), f"{node.label}: no SSH answer at {address}:{port} "
                                                                  f"after {s.connect_attempts} attempts") from last

    def _jump(self, address: str, port: int) -> paramiko.Channel:
        """A direct-tcpip channel through the bastion; the bastion's key is pinned too (known_hosts)."""
        user, host, bport = parse_bastion(self.settings.bastion or "")
        with self._lock:
            bastion = self._bastion
        if bastion is None or not bastion.get_transport() or not bastion.get_transport().is_active():
            bastion = self._connect(SshNode(f"bastion {host}", host), host, bport, user=user, jump=False)
            with self._lock:
                self._bastion = bastion
        return bastion.get_transport().open_channel("direct-tcpip", (address, port), ("127.0.0.1", 0),
                                                    timeout=self.settings.connect_timeout_s)


def parse_bastion(spec: str) -> tuple[str, str, int]:
    """``user@host[:port]`` -> (user, host, port)."""
    user, at, rest = spec.rpartition("@")
    host, _, port = rest.partition(":")
    if not at or not user or not host or (port and not port.isdigit()):
        raise ConfigError(f"aws.ssh.bastion {spec!r} is not user@host[:port]")
    return user, host, int(port or 22)


def load_key(path: str, passphrase: str | None = None, passphrase_env: str | None = None) -> paramiko.PKey:
    """The private key at ``path``, decrypted with ``passphrase`` when it is encrypted. Messages name
    ``passphrase_env`` (where the passphrase comes from), never the passphrase."""
    full = os.path.expanduser(path)
    try:
        return paramiko.PKey.from_path(full, passphrase.encode() if passphrase else None)  # positional: 5.0 renamed it
    except FileNotFoundError as e:
        raise ConfigError(f"SSH key file {path} not found (set aws.ssh.key_file or PDLIFT_SSH_KEY_FILE)") from e
    except (paramiko.PasswordRequiredException, TypeError) as e:
        # cryptography says it with a TypeError for PEM and PKCS8 keys ("Password was not given but
        # private key is encrypted", "Password was given but private key is not encrypted.")
        text = str(e).lower()
        if isinstance(e, TypeError) and "password" not in text:
            raise
        if isinstance(e, TypeError) and "not encrypted" in text:
            raise ConfigError(f"SSH key file {path} is not encrypted, but a passphrase was given"
                              + (f" (${passphrase_env}, aws.ssh.key_passphrase_env)" if passphrase_env else "")
                              + ": drop aws.ssh.key_passphrase_env") from e
        how = (f"${passphrase_env} (aws.ssh.key_passphrase_env) is not set" if passphrase_env else
               "name the variable that holds its passphrase in aws.ssh.key_passphrase_env")
        raise ConfigError(f"SSH key file {path} is encrypted: {how}") from e
    except (OSError, paramiko.SSHException, ValueError) as e:
        also = "" if not passphrase else f" (or ${passphrase_env} is not its passphrase)" if passphrase_env else \
            " (or the passphrase is wrong)"
        raise ConfigError(f"SSH key file {path} is not a usable private key{also}: {e}") from e
