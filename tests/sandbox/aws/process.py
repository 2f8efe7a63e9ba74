"""Run ``python -m sandbox.aws`` as its own process, as ``scripts/sandbox up`` does, and stop
it by PID. (Suites that need the whole sandbox use ``aws_sandbox`` from tests/fixtures.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from sandbox.s3 import free_port  # noqa: F401 - re-exported for the aws tests

REPO = Path(__file__).resolve().parents[3]


def _get(url: str, timeout: float = 2.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read() or b"null")


def start_aws_process(state_dir: Path, port: int, extra: list[str] | None = None,
                      timeout: float = 30.0) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``python -m sandbox.aws`` and wait (bounded) until its health route answers."""
    log_dir = Path(state_dir) / "sandbox" / "aws"
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / "service.log"
    env = {**os.environ, "PYTHONPATH": str(REPO), "DO_NOT_TRACK": "1"}
    cmd = [sys.executable, "-m", "sandbox.aws", "--state-dir", str(state_dir),
           "--host", "127.0.0.1", "--port", str(port), *(extra or [])]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            _get(url + "/__sandbox/health", timeout=1.0)
            return proc, url
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.1)
    stop_process(proc)
    tail = log_path.read_text(errors="replace")[-2000:]
    raise RuntimeError(f"sandbox AWS endpoint did not answer on {url}:\n{tail}")


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 60.0) -> int:
    """SIGTERM, then SIGKILL if it will not stop; returns the exit code. 60 s: on a worker at the
    lowest priority of scripts/test, a service once took more than 15 s to stop (exit -9)."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
    return proc.wait(timeout=timeout)
