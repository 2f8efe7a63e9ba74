"""The real engines' network namespace: what listens inside is reached only through a forwarder."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
import time

import pytest

from sandbox.engines.real import netns
from sandbox.ports import free_port

ADDRESS = "127.0.9.21"
# A server inside that binds every interface, as UCX and Mooncake do, and answers each connection.
SERVER = ("import socket, sys; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
          "s.bind(('0.0.0.0', int(sys.argv[1]))); s.listen()\n"
          "while True:\n    c, _ = s.accept(); c.sendall(b'inside:' + c.recv(100)); c.close()")


@pytest.fixture()
def namespace(tmp_path):
    pid = netns.start_holder(tmp_path / "netns.pid")
    yield netns.path_of(pid)
    netns.stop_holder(pid)


def _serve_inside(path: str, port: int) -> subprocess.Popen:
    server = subprocess.Popen(netns.command_inside(path, [sys.executable, "-c", SERVER, str(port)]))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            netns.connect_inside(path, (ADDRESS, port)).close()
            return server
        except OSError:
            time.sleep(0.05)
    server.kill()
    raise AssertionError("the server inside did not come up")


def _ask(port: int, text: bytes) -> bytes:
    with socket.create_connection((ADDRESS, port), timeout=5) as sock:
        sock.sendall(text)
        sock.shutdown(socket.SHUT_WR)
        return sock.recv(100)


def test_a_server_binding_every_interface_inside_is_reached_only_through_its_forwarder(namespace):
    port = free_port(ADDRESS)
    server = _serve_inside(namespace, port)
    try:
        with pytest.raises(ConnectionRefusedError):  # bound to 0.0.0.0, but in the other namespace
            socket.create_connection((ADDRESS, port), timeout=5)
        forwarder = netns.Forwarder(namespace, (ADDRESS, port)).start()
        try:
            assert _ask(port, b"one") == b"inside:one"
            assert _ask(port, b"two") == b"inside:two"  # each connection joined anew
        finally:
            forwarder.stop()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((ADDRESS, port), timeout=5)
    finally:
        server.kill()
        server.wait()


def _reset_by_the_far_end(port: int, text: bytes) -> bool:
    """Whether the far end reset the connection, at whichever step the client first meets the
    reset: the send or the read (ECONNRESET, EPIPE), or the shutdown, when the reset came before it
    (ENOTCONN: only a reset takes a connected socket to CLOSED; after an orderly close, FIN, the
    shutdown works and the read returns b''). On a loaded machine the forwarder's reset came before
    the shutdown, and a test that expected it at the read failed."""
    with socket.create_connection((ADDRESS, port), timeout=5) as sock:
        try:
            sock.sendall(text)
            sock.shutdown(socket.SHUT_WR)
            sock.recv(100)
        except (ConnectionResetError, BrokenPipeError):
            return True
        except OSError as e:
            if e.errno != errno.ENOTCONN:
                raise
            return True
        return False


def test_a_forwarder_to_nothing_listening_inside_closes_the_connection(namespace):
    port = free_port(ADDRESS)
    forwarder = netns.Forwarder(namespace, (ADDRESS, port)).start()
    try:
        assert _reset_by_the_far_end(port, b"anyone?")
    finally:
        forwarder.stop()


def test_the_namespace_has_only_its_loopback(namespace):
    links = subprocess.run(netns.command_inside(namespace, ["ip", "-o", "link"]), capture_output=True, text=True,
                           check=True).stdout.splitlines()
    assert len(links) == 1 and ": lo:" in links[0] and ",UP" in links[0]


def test_a_process_still_in_this_machines_namespace_is_not_taken_for_the_engines_one():
    """`unshare --net` is a process before it has unshared: its namespace is then this machine's,
    whose loopback is up as well. The holder must not be handed out in that moment."""
    assert netns._loopback_up(os.getpid()) is False
