"""sandbox/nodes/sshd.py ``wait_ready``: a node's sshd is found listening even by a caller that
only gets the CPU after the deadline, and one that never listens or exits is named."""

from __future__ import annotations

import socket
import subprocess
import time

import pytest

from sandbox.nodes import sshd


@pytest.fixture
def stand_in():
    proc = subprocess.Popen(["sleep", "30"])
    yield proc
    proc.kill()
    proc.wait(timeout=5)


def _listener() -> socket.socket:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    return server


def test_a_server_listening_by_the_deadline_is_found_even_when_the_caller_looks_only_after_it(stand_in, tmp_path):
    with _listener() as server:
        # timeout 0: the deadline has passed before the first look (a caller starved until then)
        pid = sshd.wait_ready(stand_in, "127.0.0.1", server.getsockname()[1], tmp_path / "sshd.log",
                              namespaced=False, timeout=0)
    assert pid == stand_in.pid


def test_nothing_listening_is_an_error_naming_the_address_and_the_log_soon_after_the_deadline(stand_in, tmp_path):
    with _listener() as taken:
        port = taken.getsockname()[1]
    log = tmp_path / "sshd.log"
    log.write_text("sshd: could not load host key\n")
    started = time.monotonic()
    with pytest.raises(sshd.SshdError, match=rf"127\.0\.0\.1:{port} not listening after 0s: .*host key"):
        sshd.wait_ready(stand_in, "127.0.0.1", port, log, namespaced=False, timeout=0.3)
    assert 0.3 <= time.monotonic() - started < 3


def test_an_sshd_that_exited_is_named_with_its_exit_status(tmp_path):
    proc = subprocess.Popen(["sh", "-c", "exit 255"])
    proc.wait(timeout=5)
    with pytest.raises(sshd.SshdError, match=r"exited \(255\)"):
        sshd.wait_ready(proc, "127.0.0.1", 9, tmp_path / "sshd.log", namespaced=False, timeout=5)
