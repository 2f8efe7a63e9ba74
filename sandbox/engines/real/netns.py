"""One network namespace for the sandbox's real engines, and the forwarders that reach into it.

vLLM, NIXL's UCX backend and Mooncake bind every interface for some of their sockets whatever
host they are given (real-parts.md: Mooncake binds 0.0.0.0 even when told 127.0.0.1; UCX's tcp
transport listens on all interfaces). So real engines run in a namespace of their own with only
its loopback up: nothing they open is reachable from, or reaches, any other address. Every
127.0.0.0/8 address is local on that loopback, so each engine binds its pod's address there
and the prefill and decode engines reach each other's NIXL side channel and UCX ports directly.

From outside (the Kubernetes stand-in's probes, the router, pdlift's canary and load generator),
an engine is reached through a forwarder that listens on the pod's address and port in the
sandbox's namespace and connects, from a thread that has entered the engines' namespace
(setns(2) moves only the calling thread), to the same address and port inside.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path

CLONE_NEWNET = 0x40000000
_LIBC = ctypes.CDLL(None, use_errno=True)


class NetnsError(RuntimeError):
    """The namespace could not be made or entered."""


def start_holder(pid_file: Path, marker: str = "") -> int:
    """A process that keeps the engines' namespace alive (its loopback up); its pid is written to
    ``pid_file``. The namespace is ``/proc/PID/ns/net``; it goes when the holder is killed (with
    its process group: the shell waits on a sleep). ``marker`` (a state dir) stays in the holder's
    argv, so ``scripts/sandbox down`` knows it as one of that sandbox's processes."""
    script = "ip link set lo up || exit 1; while :; do sleep 3600; done"
    proc = subprocess.Popen(["unshare", "--net", "--", "sh", "-c", script, "pdlift-engines-netns",
                             *([marker] if marker else [])],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise NetnsError(f"unshare --net failed (exit {proc.returncode}): {proc.stderr.read().decode().strip()}")
        if _loopback_up(proc.pid):
            pid_file.parent.mkdir(parents=True, exist_ok=True)
            pid_file.write_text(f"{proc.pid}\n")
            proc.returncode = 0  # keeps Popen.__del__ quiet: the holder outlives this process on purpose
            return proc.pid
        time.sleep(0.05)
    proc.kill()
    raise NetnsError("the engines' namespace did not bring its loopback up within 10 s")


def stop_holder(pid: int) -> None:
    """Kill the holder and its sleep (its process group); the namespace goes with them."""
    import signal

    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _loopback_up(pid: int) -> bool:
    """Whether ``pid`` is in a network namespace of its own whose loopback is up. Until `unshare`
    has unshared, its /proc/PID/ns/net is still this machine's namespace, whose loopback is up
    too: taken then (seen on a busy machine), the engines would run beside every other process."""
    try:
        if os.readlink(f"/proc/{pid}/ns/net") == os.readlink("/proc/self/ns/net"):
            return False
    except OSError:
        return False
    out = subprocess.run(["nsenter", f"--net=/proc/{pid}/ns/net", "--", "ip", "-o", "link", "show", "lo"],
                         capture_output=True, text=True)
    return out.returncode == 0 and ",UP" in out.stdout


def path_of(pid: int) -> str:
    return f"/proc/{pid}/ns/net"


def command_inside(netns: str, argv: list[str]) -> list[str]:
    """``argv`` run inside the namespace (nsenter enters only the network namespace)."""
    return ["nsenter", f"--net={netns}", "--", *argv]


def connect_inside(netns: str, address: tuple[str, int], timeout: float = 5.0) -> socket.socket:
    """A TCP connection made from inside the namespace, on a short-lived thread that enters it."""
    result: dict[str, object] = {}

    def dial() -> None:
        try:
            fd = os.open(netns, os.O_RDONLY)
            try:
                if _LIBC.setns(fd, CLONE_NEWNET) != 0:
                    raise NetnsError(f"setns({netns}): {os.strerror(ctypes.get_errno())}")
            finally:
                os.close(fd)
            result["socket"] = socket.create_connection(address, timeout=timeout)
        except Exception as e:  # noqa: BLE001 (handed to the caller's thread)
            result["error"] = e

    thread = threading.Thread(target=dial, daemon=True)
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]  # type: ignore[misc]
    sock = result["socket"]
    sock.settimeout(None)  # type: ignore[union-attr]
    return sock  # type: ignore[return-value]


class Forwarder:
    """Listens on ``address`` here; each connection is joined to the same address inside ``netns``."""

    def __init__(self, netns: str, address: tuple[str, int]):
        self.netns, self.address = netns, address
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(address)
        self.listener.listen(64)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True, name=f"forward-{address[0]}:{address[1]}")

    def start(self) -> "Forwarder":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        with contextlib.suppress(OSError):  # wakes the accept() blocked in the other thread (close alone does not)
            self.listener.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self.listener.close()
        self._thread.join(timeout=5)

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                outside, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._join, args=(outside,), daemon=True).start()

    def _join(self, outside: socket.socket) -> None:
        try:
            inside = connect_inside(self.netns, self.address)
        except OSError:
            # The engine is not listening (yet): the caller's connection is reset, as a probe of a
            # starting engine would be answered.
            outside.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            outside.close()
            return
        back = threading.Thread(target=_pump, args=(inside, outside), daemon=True)
        back.start()
        _pump(outside, inside)
        back.join()
        inside.close()
        outside.close()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while chunk := source.recv(65536):
            sink.sendall(chunk)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)
        with contextlib.suppress(OSError):
            source.shutdown(socket.SHUT_RD)
