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
