"""The demo's steps: a tool that hangs is stopped after the step's limit and named, with its output in the log."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
import demo  # noqa: E402


@pytest.fixture()
def demo_log(tmp_path, monkeypatch):
    monkeypatch.setattr(demo, "DEMO", tmp_path)
    monkeypatch.setattr(demo, "LOG", tmp_path / "demo.log")
    return tmp_path / "demo.log"


def test_a_hung_step_is_stopped_at_its_limit_and_named(demo_log, tmp_path):
    marker = tmp_path / "grandchild-survived"
    # The tool's own child too (its process group): it would write the marker after 3 s.
    hang = [sys.executable, "-c", "import subprocess, sys, time; print('started', flush=True); "
            f"subprocess.Popen(['sh', '-c', 'sleep 3; touch {marker}']); time.sleep(60)"]
    started = time.monotonic()
    with pytest.raises(SystemExit, match=r"demo: hanger did not finish within 1 s and was stopped"):
        demo.step("hanger", hang, timeout_s=1)
    assert time.monotonic() - started < 10
    assert "started" in demo_log.read_text()
    time.sleep(3.5)
    assert not marker.exists()


def test_a_step_within_its_limit_returns_its_time_and_a_failing_one_names_its_exit(demo_log):
    assert demo.step("quick", [sys.executable, "-c", "print('fine')"], timeout_s=30) < 30
    assert "fine" in demo_log.read_text()
    with pytest.raises(SystemExit, match=r"demo: broken failed \(exit 3\)"):
        demo.step("broken", [sys.executable, "-c", "raise SystemExit(3)"], timeout_s=30)


def test_a_process_that_has_exited_is_not_alive_and_this_one_is():
    import os
    import subprocess

    gone = subprocess.Popen(["true"])
    gone.wait()
    assert demo._alive(gone.pid) is False
    assert demo._alive(os.getpid()) is True


def test_a_server_too_slow_to_answer_once_is_asked_again_and_a_silent_one_ends_the_demo(monkeypatch):
    """A poll of the run that timed out ended the demo with a traceback while the run went on (seen
    on a loaded machine): the demo asks again, within its attempts, as it does after a 503."""
    import http.server
    import threading

    asked = []
    wait = time.sleep  # the server's own, before the demo's back-off is taken away below

    class Slow(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            asked.append(self.path)
            if self.path == "/api/late" and len(asked) == 1 or self.path == "/api/never":
                wait(1.5)  # past the client's timeout
            body = b'{"state_type": "RUNNING"}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setattr(demo, "API", f"http://127.0.0.1:{server.server_address[1]}/api")
    monkeypatch.setattr(demo.time, "sleep", lambda s: None)  # the back-off between attempts
    try:
        assert demo.http("GET", "/late", timeout=0.5) == {"state_type": "RUNNING"}
        assert asked == ["/api/late", "/api/late"]
        asked.clear()
        with pytest.raises(TimeoutError):
            demo.http("GET", "/never", timeout=0.3, attempts=3)
        assert asked == ["/api/never"] * 3
    finally:
        server.shutdown()
        server.server_close()
