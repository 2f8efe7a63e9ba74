"""The DCGM exporter stand-in: GPU utilisation from the engines' activity, in dcgm-exporter's format."""

from __future__ import annotations

import json
import time

from sandbox.engines.dcgm import Collector
from tasks.parsing.prometheus import parse_prometheus


def write(state, node: str, pod: str, busy_s: float, at: float, gpus: int = 8, mirror: str | None = None) -> None:
    folder = state / "sandbox" / "gpu-activity" / node
    folder.mkdir(parents=True, exist_ok=True)
    record = {"namespace": "ns", "pod": pod, "container": "engine", "gpus": gpus, "busy_s": busy_s,
              "monotonic": at, "wall": time.time(), **({"mirror": mirror} if mirror else {})}
    (folder / f"ns_{pod}_engine.json").write_text(json.dumps(record))


def test_utilisation_is_busy_time_over_the_period_and_a_group_worker_mirrors_its_leader(tmp_path, monkeypatch):
    monkeypatch.setenv("PDLIFT_STATE_DIR", str(tmp_path))
    worker, leader_elsewhere = Collector("node-b", kubernetes=True), Collector("node-a", kubernetes=False)
    write(tmp_path, "node-a", "prefill-0", busy_s=10.0, at=100.0)
    write(tmp_path, "node-b", "prefill-0-1", busy_s=0.0, at=100.0, mirror="ns_prefill-0_engine.json")
    worker.collect()
    leader_elsewhere.collect()
    write(tmp_path, "node-a", "prefill-0", busy_s=13.0, at=104.0)    # busy 3 of the last 4 seconds
    write(tmp_path, "node-b", "prefill-0-1", busy_s=0.0, at=104.0, mirror="ns_prefill-0_engine.json")
    worker.collect()
    leader_elsewhere.collect()
    for collector, pod in ((worker, "prefill-0-1"), (leader_elsewhere, None)):
        samples = [s for s in parse_prometheus(collector.render()) if s.name == "DCGM_FI_DEV_GPU_UTIL"]
        assert len(samples) == 8 and {s.value for s in samples} == {75.0}
        assert {s.labels.get("pod") for s in samples} == {pod}           # pod labels only with -k
        assert {s.labels["gpu"] for s in samples} == {str(i) for i in range(8)}


def test_gpus_nobody_holds_are_idle_and_a_process_that_stopped_publishing_is_gone(tmp_path, monkeypatch):
    monkeypatch.setenv("PDLIFT_STATE_DIR", str(tmp_path))
    collector = Collector("node-c", kubernetes=True)
    write(tmp_path, "node-c", "small", busy_s=0.0, at=10.0, gpus=2)
    collector.collect()
    write(tmp_path, "node-c", "small", busy_s=1.0, at=11.0, gpus=2)
    collector.collect()
    values = [s.value for s in parse_prometheus(collector.render()) if s.name == "DCGM_FI_DEV_GPU_UTIL"]
    assert values == [100.0, 100.0] + [0.0] * 6
    stale = json.loads((tmp_path / "sandbox/gpu-activity/node-c/ns_small_engine.json").read_text())
    stale["wall"] -= 60
    (tmp_path / "sandbox/gpu-activity/node-c/ns_small_engine.json").write_text(json.dumps(stale))
    collector.collect()
    assert all(s.value == 0 and "pod" not in s.labels
               for s in parse_prometheus(collector.render()) if s.name == "DCGM_FI_DEV_GPU_UTIL")


def test_the_exporter_process_serves_the_collected_utilisation_at_metrics_every_interval(tmp_path):
    """`dcgm-exporter` as a pod runs it: /metrics in the Prometheus text format, collected again
    every interval (-c, ms), /health OK, another path 404, and a client's kept-alive connection served."""
    import http.client
    import os
    import subprocess
    import sys
    from pathlib import Path

    from sandbox.s3 import free_port

    repo = Path(__file__).resolve().parents[3]
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(repo), "PDLIFT_STATE_DIR": str(tmp_path), "PDLIFT_SANDBOX_NODE": "node-d"}
    write(tmp_path, "node-d", "decode", busy_s=0.0, at=time.monotonic(), gpus=8)
    proc = subprocess.Popen([sys.executable, "-m", "sandbox.engines", "--", "dcgm-exporter", "-k", "-c", "200",
                             "-a", f":{port}"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert "Starting webserver on 127.0.0.1:" in proc.stdout.readline()
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)

        def get(path: str) -> tuple[int, str, str]:
            connection.request("GET", path)
            answer = connection.getresponse()
            return answer.status, answer.getheader("Content-Type"), answer.read().decode()

        assert get("/health")[::2] == (200, "OK")
        assert get("/nothing")[0] == 404
        deadline = time.monotonic() + 20
        while True:   # busy all the time from here: 100 % once an interval has passed since a write
            start = time.monotonic()
            write(tmp_path, "node-d", "decode", busy_s=start, at=start, gpus=8)
            status, kind, text = get("/metrics")
            values = {s.value for s in parse_prometheus(text) if s.name == "DCGM_FI_DEV_GPU_UTIL"}
            if values == {100.0} or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert status == 200 and kind.startswith("text/plain"), (status, kind)
        assert values == {100.0}, text
        assert {s.labels["pod"] for s in parse_prometheus(text) if s.name == "DCGM_FI_DEV_GPU_UTIL"} == {"decode"}
    finally:
        proc.kill()
        proc.wait(timeout=10)
