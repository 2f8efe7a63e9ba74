"""The SSH adapter against a real OpenSSH sshd on loopback (key auth, pinned host keys)."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

import paramiko
import pytest

from tests.timing import timing
from tasks.adapters.ssh import NodeShell, SshNode, SshSettings, run_on_all
from tasks.adapters.ssh_hostkeys import fingerprint, parse_key_line
from tasks.parsing.console_output import parse_console_output
from tasks.errors import HostKeyMismatch, RemoteCommandFailed, RemoteCommandTimeout, RemoteUnavailable, StageFailed
from tests.sandbox.staging.sshd import Sshd, free_port, keygen

pytestmark = pytest.mark.sandbox

CONSOLE = """[   12.3] cloud-init[1012]: Cloud-init v. 22.2.2 finished
-----BEGIN SSH HOST KEY FINGERPRINTS-----
256 SHA256:abc root@ip-10-0-0-1 (ED25519)
-----END SSH HOST KEY FINGERPRINTS-----
[   12.4] ec2: -----BEGIN SSH HOST KEY KEYS-----
[   12.4] ec2: {line} root@ip-10-0-0-1
-----END SSH HOST KEY KEYS-----
"""


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    server = Sshd.create(tmp_path_factory.mktemp("sshd"), ["127.0.0.21"]).start()
    yield server
    server.stop()


@pytest.fixture
def settings(sshd):
    return SshSettings(user=sshd.user, key_file=str(sshd.client_key), port=sshd.port,
                       connect_timeout_s=3, connect_attempts=2, retry_delay_s=0.1)


@pytest.fixture
def node(sshd):
    return SshNode("i-0node", "127.0.0.21", tuple(parse_console_output(CONSOLE.format(line=sshd.host_key_line))))


def _procs_with(marker: str) -> list[str]:
    found = []
    for pid in os.listdir("/proc"):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker in cmd and state != "Z":
            found.append(f"{pid} {cmd}")
    return found


def _connections_to(address: str, port: int) -> int:
    """Established TCP connections whose far end is ``address:port`` (a client's, in /proc/net/tcp)."""
    far = f"{socket.inet_aton(address)[::-1].hex().upper()}:{port:04X}"
    rows = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return sum(1 for row in rows if row.split()[2] == far and row.split()[3] == "01")


def test_host_keys_pinned_from_console_output_let_a_command_run_and_stream_its_lines(settings, node):
    lines = []
    with NodeShell(settings) as shell:
        result = shell.run(node, ["sh", "-c", "echo one; echo two >&2; echo three"], timeout_s=10,
                           on_line=lambda stream, line: lines.append((stream, line)))
    assert result.exit_code == 0
    assert result.stdout == "one\nthree"
    assert ("stderr", "two") in lines and ("stdout", "one") in lines and ("stdout", "three") in lines


def test_a_changed_host_key_is_refused_naming_host_and_both_fingerprints(settings, sshd, tmp_path):
    other = keygen(tmp_path / "other_host_key")
    node = SshNode("i-0changed", "127.0.0.21", (other,))
    witness = tmp_path / "ran"
    with NodeShell(settings) as shell, pytest.raises(HostKeyMismatch) as caught:
        shell.run(node, ["touch", str(witness)], timeout_s=10)
    message = str(caught.value)
    assert "i-0changed" in message and "127.0.0.21" in message
    assert fingerprint(parse_key_line(sshd.host_key_line)) in message
    assert fingerprint(parse_key_line(other)) in message
    assert not witness.exists()


def test_a_node_without_any_pinned_key_is_refused_before_connecting(settings):
    with NodeShell(settings) as shell, pytest.raises(HostKeyMismatch, match="no pinned host key"):
        shell.run(SshNode("i-0unknown", "127.0.0.21"), ["true"], timeout_s=5)


def test_an_operator_known_hosts_file_pins_a_node(settings, sshd, tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.21]:{sshd.port} {sshd.host_key_line}\n")
    with NodeShell(SshSettings(**{**settings.__dict__, "known_hosts": str(known)})) as shell:
        assert shell.run(SshNode("i-0kh", "127.0.0.21"), ["echo", "ok"], timeout_s=10).stdout == "ok"


@timing
def test_an_unreachable_node_raises_remote_unavailable_after_bounded_retries(settings):
    closed = SshNode("i-0gone", "127.0.0.22", ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl",),
                     port=free_port("127.0.0.22"))
    start = time.monotonic()
    with NodeShell(settings) as shell, pytest.raises(RemoteUnavailable, match="after 2 attempts") as caught:
        shell.run(closed, ["true"], timeout_s=5)
    assert time.monotonic() - start < 5
    assert isinstance(caught.value.__cause__, OSError)


class _SlowToAuthenticate(paramiko.ServerInterface):
    """An SSH server (paramiko's server side) that answers a key only after ``delay_s``: a node
    whose sshd is busy, as a sandbox node on a starved CPU was (paramiko: "Authentication timeout.")."""

    def __init__(self, delay_s: float):
        self.delay_s = delay_s

    def get_allowed_auths(self, username):
        return "publickey"

    def check_auth_publickey(self, username, key):
        time.sleep(self.delay_s)
        return paramiko.AUTH_FAILED


@timing  # the client's authentication timeout against a server's delay
def test_a_node_slow_to_answer_the_authentication_is_retried_then_unavailable_not_a_rejected_key(settings):
    host_key = paramiko.RSAKey.generate(1024)
    address = "127.0.0.23"
    listener = socket.create_server((address, free_port(address)))
    accepted: list[paramiko.Transport] = []

    def serve() -> None:
        listener.settimeout(30)
        while len(accepted) < 3:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            transport = paramiko.Transport(conn)
            transport.add_server_key(host_key)
            transport.start_server(server=_SlowToAuthenticate(delay_s=10))
            accepted.append(transport)

    threading.Thread(target=serve, daemon=True).start()
    slow = SshNode("i-0slow", address, (f"ssh-rsa {host_key.get_base64()}",), port=listener.getsockname()[1])
    quick = SshSettings(**{**settings.__dict__, "connect_timeout_s": 2})
    try:
        with NodeShell(quick) as shell, pytest.raises(RemoteUnavailable, match="after 2 attempts") as caught:
            shell.run(slow, ["true"], timeout_s=5)
    finally:
        listener.close()
        for transport in accepted:
            transport.close()
    assert "authentication in time" in str(caught.value) and "rejected" not in str(caught.value)
    assert len(accepted) == 2  # both attempts reached the node


def test_a_rejected_client_key_is_a_stage_failure_not_a_retry(settings, node, tmp_path):
    keygen(tmp_path / "stranger")
    with NodeShell(SshSettings(**{**settings.__dict__, "key_file": str(tmp_path / "stranger")})) as shell:
        with pytest.raises(StageFailed, match="was rejected") as caught:
            shell.run(node, ["true"], timeout_s=5)
    assert not isinstance(caught.value, RemoteUnavailable)


@timing
def test_a_timeout_kills_the_whole_remote_process_group(settings, node):
    marker = f"pdlift-hang-{os.getpid()}"
    script = (f"(exec -a {marker}-a sleep 300) & (exec -a {marker}-b sleep 301) & sleep 0.2; "
              f"echo started; exec -a {marker}-c sleep 302")
    running = []
    with NodeShell(settings) as shell:
        with pytest.raises(RemoteCommandTimeout) as caught:
            # 5 s: time for the session to open and the script to start (2 s was once not
            # enough with the suite's other lanes beside it), then the kill
            shell.run(node, ["bash", "-c", script], timeout_s=5,
                      on_line=lambda s, line: running.extend(_procs_with(marker)))
    assert len(running) >= 2, "the command never got going"
    assert caught.value.cleaned_up and "killed its process group" in str(caught.value)
    assert _procs_with(marker) == []


@timing  # each kill opens a connection within connect_timeout_s (3 s): a bound measured on this machine
def test_commands_timing_out_together_on_a_full_connection_are_each_killed_and_the_others_go_on(tmp_path):
    # sshd allows MaxSessions sessions per connection: two commands time out at once while a third
    # runs on, on a connection at its limit of 3. Each kill needs a session: the timed-out one's.
    server, settings, node = _limited_sshd(tmp_path, "127.0.0.22", max_sessions=3)
    try:
        marker = f"pdlift-full-{os.getpid()}"
        outcomes: dict[str, object] = {}
        with NodeShell(settings) as shell:
            shell.run(node, ["true"], timeout_s=10)  # one connection, then three sessions on it

            def one(name: str, seconds: float, timeout_s: float) -> None:
                try:
                    outcomes[name] = shell.run(node, ["bash", "-c", f"exec -a {marker}-{name} sleep {seconds}"],
                                               timeout_s=timeout_s).exit_code
                except Exception as e:  # noqa: BLE001 - the outcome is what the test compares
                    outcomes[name] = e

            threads = [threading.Thread(target=one, args=(n, s, t))
                       for n, s, t in (("a", 300, 2), ("b", 300, 2), ("c", 4, 30))]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
        assert isinstance(outcomes["a"], RemoteCommandTimeout) and outcomes["a"].cleaned_up, outcomes
        assert isinstance(outcomes["b"], RemoteCommandTimeout) and outcomes["b"].cleaned_up, outcomes
        assert outcomes["c"] == 0, outcomes  # not "connection lost": the kills did not cost it its connection
        assert _procs_with(marker) == []
    finally:
        server.stop()


def test_a_session_the_full_connection_refuses_runs_on_a_connection_of_its_own_and_the_others_go_on(tmp_path):
    # sshd refuses a third session on a connection at its MaxSessions of 2 ("open failed"). Closing
    # that connection to retry would end the two commands on it: paramiko closes their channels,
    # and each would read as exit -1.
    server, settings, node = _limited_sshd(tmp_path, "127.0.0.23", max_sessions=2)
    marker = f"pdlift-two-{os.getpid()}"
    try:
        outcomes: dict[str, object] = {}
        with NodeShell(settings) as shell:
            shell.run(node, ["true"], timeout_s=10)  # the shared connection

            def one(name: str, argv: list[str]) -> None:
                try:
                    outcomes[name] = shell.run(node, argv, timeout_s=60).stdout.strip()
                except Exception as e:  # noqa: BLE001 - the outcome is what the test compares
                    outcomes[name] = e

            threads = [threading.Thread(target=one, args=(n, ["bash", "-c", f"(exec -a {marker}-{n} sleep 10); "
                                                                             f"echo {n} done"]))
                       for n in ("a", "b")]
            for t in threads:
                t.start()
            deadline = time.monotonic() + 30
            while len(_procs_with(marker)) < 2 and time.monotonic() < deadline:  # both sessions open
                time.sleep(0.05)
            one("c", ["echo", "c done"])
            # The third one's own connection is closed after it (paramiko's transport thread ends it
            # soon after the call returns); the shared one stays.
            deadline = time.monotonic() + 5
            while (open_to_node := _connections_to("127.0.0.23", server.port)) > 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            for t in threads:
                t.join(60)
        assert outcomes == {"a": "a done", "b": "b done", "c": "c done"}, outcomes
        assert open_to_node == 1
    finally:
        server.stop()


def _limited_sshd(tmp_path: Path, address: str, max_sessions: int) -> tuple[Sshd, SshSettings, SshNode]:
    """A started sshd allowing ``max_sessions`` sessions per connection, settings to reach it, its node."""
    server = Sshd.create(tmp_path / "sshd", [address], max_sessions=max_sessions).start()
    settings = SshSettings(user=server.user, key_file=str(server.client_key), port=server.port,
                           connect_timeout_s=3, connect_attempts=2, retry_delay_s=0.1)
    node = SshNode(f"i-0{max_sessions}", address, tuple(parse_console_output(CONSOLE.format(line=server.host_key_line))))
    return server, settings, node


def test_shell_metacharacters_in_arguments_are_passed_through_verbatim(settings, node, tmp_path):
    witness = tmp_path / "pwned"
    args = [f"; touch {witness}", f"$(touch {witness})", f"`touch {witness}`", f"' && touch {witness} '",
            "a\nb", "*", "~"]
    with NodeShell(settings) as shell:
        result = shell.run(node, ["printf", "%s|"] + args, timeout_s=10)
    assert result.stdout == "|".join(args) + "|"
    assert not witness.exists()


def test_environment_reaches_the_command_but_no_command_line_and_no_output(settings, node, tmp_path):
    canary = "pdlift-canary-7f3a9c"
    seen = tmp_path / "seen"
    lines = []
    # The command (on this machine's sshd) records its environment and every ancestor's command line.
    probe = (f'printenv CANARY > {seen}.env; p=$$; while [ "$p" -gt 1 ]; do '
             f'tr "\\0" " " < /proc/$p/cmdline >> {seen}.cmdlines; echo >> {seen}.cmdlines; '
             'l=$(cat /proc/$p/stat); l=${l##*) }; set -- $l; p=$2; done; echo "value=$CANARY"')
    with NodeShell(settings) as shell:
        result = shell.run(node, ["sh", "-c", probe], env={"CANARY": canary}, timeout_s=10,
                           on_line=lambda s, line: lines.append(line))
    assert Path(f"{seen}.env").read_text().strip() == canary
    assert canary not in Path(f"{seen}.cmdlines").read_text()
    assert result.stdout == "value=***" and all(canary not in line for line in lines)


def test_a_failing_command_raises_with_its_exit_code_and_stderr(settings, node):
    with NodeShell(settings) as shell, pytest.raises(RemoteCommandFailed, match="no such thing") as caught:
        shell.run(node, ["sh", "-c", "echo no such thing >&2; exit 7"], timeout_s=10)
    assert caught.value.exit_code == 7
    with NodeShell(settings) as shell:
        assert shell.run(node, ["false"], timeout_s=10, check=False).exit_code == 1


def test_upload_copies_a_file_over_sftp(settings, node, tmp_path):
    src = tmp_path / "script.py"
    src.write_text("print('hello')\n")
    dest = tmp_path / "remote" / "nested" / "script.py"
    with NodeShell(settings) as shell:
        shell.upload(node, str(src), str(dest), mode=0o755)
    assert dest.read_text() == "print('hello')\n" and os.stat(dest).st_mode & 0o777 == 0o755


def test_uploads_racing_to_make_the_same_new_directory_all_land(settings, node, tmp_path):
    # Sessions that share a login directory (several shells, or the sandbox's nodes, which share
    # this machine's home) make the same folders at once; OpenSSH's sftp-server answers a mkdir of
    # a folder that appeared meanwhile with a bare SSH_FX_FAILURE.
    from concurrent.futures import ThreadPoolExecutor

    src = tmp_path / "script.py"
    src.write_text("print('hello')\n")
    for attempt in range(3):
        remote = tmp_path / f"remote-{attempt}" / "a" / "b" / "c" / "d"
        shells = [NodeShell(settings) for _ in range(8)]
        try:
            # connected first, so the uploads start together; 60 s: this test runs in scripts/test's
            # other lane, which gets only the CPU the measured lane leaves, and at 10 s one `true`
            # ran past its bound with the suite under coverage
            for shell in shells:
                shell.run(node, ["true"], timeout_s=60)
            with ThreadPoolExecutor(len(shells)) as pool:
                list(pool.map(lambda i: shells[i].upload(node, str(src), str(remote / f"s{i}.py")), range(len(shells))))
        finally:
            for shell in shells:
                shell.close()
        assert sorted(p.name for p in remote.iterdir()) == [f"s{i}.py" for i in range(8)]


def test_a_node_behind_a_bastion_is_reached_through_it(settings, sshd, node, tmp_path):
    bastion = Sshd.create(tmp_path / "bastion", ["127.0.0.23"], client_key=sshd.client_key).start()
    try:
        known = tmp_path / "known_hosts"
        known.write_text(f"[127.0.0.23]:{bastion.port} {bastion.host_key_line}\n")
        via = SshSettings(**{**settings.__dict__, "known_hosts": str(known),
                             "bastion": f"{bastion.user}@127.0.0.23:{bastion.port}"})
        with NodeShell(via) as shell:
            assert shell.run(node, ["echo", "through"], timeout_s=10).stdout == "through"
        bastion.stop()
        with NodeShell(via) as shell, pytest.raises(RemoteUnavailable, match="bastion"):
            shell.run(node, ["true"], timeout_s=5)
        known.write_text(f"[127.0.0.23]:{bastion.port} {sshd.host_key_line}\n")  # wrong key for it
        bastion.start()
        with NodeShell(via) as shell, pytest.raises(HostKeyMismatch, match="127.0.0.23"):
            shell.run(node, ["true"], timeout_s=5)
    finally:
        bastion.stop()


@pytest.mark.slow
def test_fan_out_to_64_nodes_holds_the_parallelism_bound(tmp_path, sshd):
    # sshd listens on at most 16 sockets (MAX_LISTEN_SOCKS): 4 daemons x 16 addresses = 64 nodes.
    daemons = [Sshd.create(tmp_path / f"sshd{d}", [f"127.0.{d + 1}.{i}" for i in range(1, 17)],
                           port=sshd.port, client_key=sshd.client_key).start() for d in range(4)]
    try:
        settings = SshSettings(user=sshd.user, key_file=str(sshd.client_key), port=sshd.port,
                               connect_timeout_s=10, max_parallel=16)
        nodes = [SshNode(f"i-{d}{i:02d}", a, (daemon.host_key_line,))
                 for d, daemon in enumerate(daemons) for i, a in enumerate(daemon.addresses)]
        stamps = tmp_path / "stamps"
        stamps.mkdir()
        with NodeShell(settings) as shell:
            def job(n: SshNode):
                return shell.run(n, ["sh", "-c", f'date +%s.%N > {stamps}/{n.name}.a; sleep 0.2; '
                                                 f'date +%s.%N > {stamps}/{n.name}.b; echo $SSH_CONNECTION'],
                                 timeout_s=60).stdout
            outcomes = run_on_all(nodes, job, max_parallel=settings.max_parallel)
        assert [o.error for o in outcomes] == [None] * 64
        assert [o.value.split()[2] for o in outcomes] == [n.address for n in nodes]
        spans = [(float((stamps / f"{n.name}.a").read_text()), float((stamps / f"{n.name}.b").read_text()))
                 for n in nodes]
        peak = max(sum(a <= t < b for a, b in spans) for t, _ in spans)
        assert 1 < peak <= 16
    finally:
        for daemon in daemons:
            daemon.stop()


@pytest.mark.parametrize("fmt", ["TraditionalOpenSSL", "PKCS8"])
def test_a_pem_key_encrypted_or_not_against_the_passphrase_given_is_a_config_error_naming_the_variable(tmp_path, fmt):
    """cryptography reports these with a TypeError ("Password was not given but private key is
    encrypted" and the reverse): pdlift says which, names the variable, never the value."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    from tasks.adapters.ssh_connect import load_key
    from tasks.errors import ConfigError

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    fmt_ = getattr(serialization.PrivateFormat, fmt)
    secret = "pdlift-canary-passphrase-7f3e"
    encrypted, plain = tmp_path / "enc.pem", tmp_path / "plain.pem"
    encrypted.write_bytes(key.private_bytes(serialization.Encoding.PEM, fmt_,
                                            serialization.BestAvailableEncryption(secret.encode())))
    plain.write_bytes(key.private_bytes(serialization.Encoding.PEM, fmt_, serialization.NoEncryption()))
    with pytest.raises(ConfigError, match=r"is encrypted: \$KEY_PASS \(aws.ssh.key_passphrase_env\) is not set"):
        load_key(str(encrypted), None, "KEY_PASS")
    with pytest.raises(ConfigError, match=r"is not encrypted, but a passphrase was given \(\$KEY_PASS") as given:
        load_key(str(plain), secret, "KEY_PASS")
    assert secret not in str(given.value)
