"""Reading the engines and the DCGM exporter around a load point, with spec'd fakes of the ports."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from blueprints.loader import load_blueprint
from tasks.adapters.kube_apply import PodInfo
from tasks.errors import RemoteUnavailable
from tasks.parsing.prometheus import parse_prometheus
from tasks.planning.manifests import common
from tasks.stages.benchmark_server import ServerMetrics

BP = load_blueprint(Path(__file__).resolve().parents[2] / "blueprints" / "sandbox-2p2d.yaml")


def pod(name: str, role: str, node: str, ip: str, index: str = "0", ready: bool = True) -> PodInfo:
    labels = {common.LWS_NAME_LABEL: role, common.LWS_WORKER_INDEX_LABEL: index}
    return PodInfo("ns", name, node, "Running", ip, ready, labels, {}, ())


class Kube:
    def __init__(self, exporters=()):
        self.exporters = list(exporters)

    def pods(self, namespace: str, selector: dict) -> list[PodInfo]:
        if namespace == "gpu-operator":
            return self.exporters
        role = selector[common.LWS_NAME_LABEL]
        return {"prefill": [pod("p-0", "prefill", "n-p0", "10.0.0.1"), pod("p-1", "prefill", "n-p1", "10.0.0.2")],
                "decode": [pod("d-0", "decode", "n-d0", "10.0.0.3"),
                           pod("d-0-1", "decode", "n-d1", "10.0.0.4", index="1")]}[role]


class Http:
    """Each engine's queue histogram grows by 10 requests and 1 s per reading; one prefill
    pod fails its first reading after discovery; the decode worker serves no HTTP at all."""

    def __init__(self, fail_once: str = "10.0.0.2"):
        self.calls: dict[str, int] = {}
        self.fail_once = fail_once

    def metrics(self, url: str):
        host = url.split("//")[1].split(":")[0]
        n = self.calls[host] = self.calls.get(host, 0) + 1
        if host == "10.0.0.4":
            raise RemoteUnavailable(f"GET {url}: connection refused")
        if host == self.fail_once and n == 2:
            raise RemoteUnavailable(f"GET {url}: timed out")
        if host.startswith("10.0.9"):
            return parse_prometheus(f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",Hostname="x"}} {40 + n}\n')
        return parse_prometheus(f"vllm:request_queue_time_seconds_sum {n * 1.0}\n"
                                f"vllm:request_queue_time_seconds_count {n * 10.0}\n")


def test_a_pod_missing_from_a_reading_is_left_out_of_the_points_differences():
    http = Http()
    server = ServerMetrics(BP, Kube(), http, "green")
    assert [t.pod.name for t in server.engines] == ["p-0", "p-1", "d-0"]   # the headless worker is dropped
    assert not any("d-0-1" in n for n in server.notes)                    # silently: it is a worker
    result, figs = server.around(lambda: "done")
    assert result == "done"
    # p-0 alone: (3 - 2) s over (30 - 20) requests; p-1's missing "before" must not count its whole counter
    assert figs.values["prefill_queue_ms_mean"] == (pytest.approx(1000.0), pytest.approx(10.0))
    assert any(n.startswith("not read: ns/p-1: ") and "timed out" in n for n in figs.notes)
    assert any("no ready DCGM exporter pod (gpu-operator, app=nvidia-dcgm-exporter)" in n for n in figs.notes)


def test_gpu_utilisation_comes_from_the_exporters_on_the_candidates_nodes_only():
    exporters = [PodInfo("gpu-operator", "dcgm-a", "n-d0", "Running", "10.0.9.1", True, {}, {}, ()),
                 PodInfo("gpu-operator", "dcgm-b", "elsewhere", "Running", "10.0.9.2", True, {}, {}, ()),
                 PodInfo("gpu-operator", "dcgm-c", "n-d1", "Running", "10.0.9.3", True, {}, {}, ())]
    http = Http(fail_once="")
    server = ServerMetrics(BP.model_copy(update={"benchmark": BP.benchmark.model_copy(update={
        "server_metrics": BP.benchmark.server_metrics.model_copy(update={"interval_s": 0.5})})}),
        Kube(exporters), http, "green")
    # the decode worker serves no metrics, but its node's GPUs run its leader's batches
    assert server.exporters == {"n-d0": "http://10.0.9.1:9400/metrics", "n-d1": "http://10.0.9.3:9400/metrics"}

    def point() -> None:   # lasts until the sampler has read the exporter twice (bounded)
        deadline = time.monotonic() + 20
        while http.calls.get("10.0.9.1", 0) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)

    _, figs = server.around(point)
    during = http.calls["10.0.9.1"] - 2            # readings between the one before and the one after
    assert during >= 2
    # the mean of the readings during the point (42, 43, ...), not the ones before or after it
    assert figs.value("decode_gpu_util") == pytest.approx(41 + (during + 1) / 2)
    assert "10.0.9.2" not in http.calls
