"""Start and stop sandbox engines as subprocesses (for tests, benchmarks and the demo).

    with EngineProcess(["vllm", "serve", "m", "--port", str(port)], env=env, log_dir=tmp) as engine:
        engine.wait_http(f"http://127.0.0.1:{port}/health")

Each process gets its own session (process group), so stopping it also stops what its shell
started; ``stop`` sends SIGTERM, then SIGKILL after a grace period.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from sandbox.engines.settings import REPO_ROOT
from sandbox.ports import free_port


# Loopback only: never through an HTTP proxy from the environment.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def engine_env(state_dir: Path, **extra: str) -> dict[str, str]:
    """A clean env for an engine: loopback bind, the given state dir, repo importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PDLIFT_SANDBOX_", "FI_", "MOONCAKE_"))}
    env.update(PDLIFT_STATE_DIR=str(state_dir), PYTHONPATH=str(REPO_ROOT), PDLIFT_SANDBOX_BIND="127.0.0.1",
               VLLM_LOG_STATS_INTERVAL="1")
    env.update(extra)
    return env


class EngineProcess:
    def __init__(self, command: list[str], *, env: dict[str, str], log_dir: Path, name: str = "engine"):
        self.command, self.env = command, env
        self.log_path = Path(log_dir) / f"{name}.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> "EngineProcess":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "sandbox.engines", "--", *self.command], env=self.env, cwd=REPO_ROOT,
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def wait_http(self, url: str, timeout: float = 20.0) -> None:
        """Wait until GET url answers 200; fail early with the log if the process exits."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"{self.command[:2]} exited {self.proc.returncode}:\n{self.log()}")
            try:
                with _OPENER.open(url, timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        raise TimeoutError(f"{url} not healthy after {timeout}s:\n{self.log()}")

    def wait_exit(self, timeout: float = 15.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

    def _signal_group(self, sig: int) -> bool:
        assert self.proc is not None
        try:
            os.killpg(self.proc.pid, sig)  # the group we created with start_new_session
            return True
        except ProcessLookupError:
            return False

    def stop(self, grace: float = 5.0) -> None:
        if self.proc is None or not self._signal_group(signal.SIGTERM):
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            self.proc.poll()  # reap the leader so an empty group reads as gone
            if not self._signal_group(0):
                return
            time.sleep(0.05)
        self._signal_group(signal.SIGKILL)
        self.proc.wait(timeout=grace)

    def __enter__(self) -> "EngineProcess":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Launcher:
    """Starts engines with one private state dir and stops every one of them on ``stop_all``."""

    def __init__(self, state_dir: Path):
        self.state_dir = Path(state_dir)
        self.procs: list[EngineProcess] = []

    def env(self, **extra: str) -> dict[str, str]:
        return engine_env(self.state_dir, **extra)

    def start(self, command: list[str], name: str, env: dict[str, str] | None = None) -> EngineProcess:
        proc = EngineProcess(command, env=env or self.env(), log_dir=self.state_dir / "logs", name=name)
        self.procs.append(proc.start())
        return proc

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()

    port = staticmethod(free_port)
