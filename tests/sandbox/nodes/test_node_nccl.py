"""nccl-tests on sandbox nodes: the real text and -J JSON formats, bandwidth from each node's
link, and mpirun across named hosts honouring every participant's faults."""

from __future__ import annotations

import json
import re

import pytest

from tests.sandbox.nodes.helpers import run

pytestmark = pytest.mark.sandbox

ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)" + r"\s+([\d.e+]+)\s+([\d.e+]+)\s+([\d.e+]+)\s+(\S+)" * 2 + "$")
TWO_NODES = "mpirun --allow-run-as-root -np 2 -N 1 --host 127.0.0.11,127.0.0.12"


def rows(text: str) -> list[re.Match]:
    return [m for m in map(ROW.match, text.splitlines()) if m]


def busbw_at(text: str, size: int) -> float:
    return next(float(m.group(8)) for m in rows(text) if int(m.group(1)) == size)


def test_all_reduce_prints_the_nccl_tests_layout(cluster):
    code, out, _ = run(cluster.ssh("i-0aaaa"), "all_reduce_perf -b 8 -e 128M -f 2 -g 8")
    lines = out.splitlines()
    assert code == 0
    assert any(l.startswith("# nThread 1 nGpus 8 minBytes 8 maxBytes 134217728") for l in lines)
    ranks = [l for l in lines if l.startswith("#  Rank")]
    assert len(ranks) == 8 and all(re.search(r"on ip-127-0-0-11 device +\d \[0x[0-9a-f]{2}\] NVIDIA H200$", r) for r in ranks)
    header = next(l for l in lines if "#wrong" in l).split()
    assert header[1:6] == ["size", "count", "type", "redop", "root"] and header.count("#wrong") == 2
    table = rows(out)
    assert [int(m.group(1)) for m in table] == [8 << i for i in range(25)]
    assert all(m.group(3) == "float" and m.group(4) == "sum" and m.group(9) == "0" for m in table)
    assert "# Out of bounds values : 0 OK" in lines
    assert re.search(r"^# Avg bus bandwidth    : [\d.]+", out, re.M)
    assert out.rstrip().splitlines()[-1] == "# Collective test concluded: all_reduce_perf"


def test_one_node_all_reduce_reaches_nvlink_bandwidth_at_large_sizes(cluster):
    _, out, _ = run(cluster.ssh("i-0aaaa"), "all_reduce_perf -b 8G -e 16G -f 2 -g 8")
    assert 470 <= busbw_at(out, 16 << 30) <= 495


def test_json_output_holds_every_row_and_the_verdicts(cluster):
    code, out, _ = run(cluster.ssh("i-0aaaa"), "cd $(mktemp -d) && all_reduce_perf -b 1M -e 16M -f 4 -g 8 -J r.json "
                                               "&& cat r.json")
    assert code == 0 and "# Writing JSON output to r.json" in out
    doc = json.loads(out.splitlines()[-1])
    assert [r["size"] for r in doc["results"]] == [1 << 20, 4 << 20, 16 << 20]
    assert doc["results"][0]["out_of_place"]["nwrong"] == 0
    assert doc["out_of_bounds"] == {"count": 0, "okay": "true"}
    assert len(doc["config"]["devices"]) == 8 and doc["config"]["devices"][0]["hostname"] == "ip-127-0-0-11"


def test_mpirun_spans_the_named_hosts(cluster):
    code, out, _ = run(cluster.ssh("i-0aaaa"), f"{TWO_NODES} all_reduce_perf -b 8G -e 8G -g 8")
    ranks = [l for l in out.splitlines() if l.startswith("#  Rank")]
    assert code == 0 and len(ranks) == 16
    assert sum("on ip-127-0-0-11 " in r for r in ranks) == sum("on ip-127-0-0-12 " in r for r in ranks) == 8
    assert 370 <= busbw_at(out, 8 << 30) <= 400  # 3.2 Tbps per node


def test_two_node_alltoall_is_limited_by_the_per_gpu_link(cluster):
    _, out, _ = run(cluster.ssh("i-0bbbb"), f"{TWO_NODES} alltoall_perf -b 2G -e 2G -g 8")
    assert 70 <= busbw_at(out, 2 << 30) <= 90
    assert rows(out)[0].group(4) == "none" and rows(out)[0].group(13) == "N/A"  # in-place is not checked


def test_nccl_debug_shows_the_efa_provider_evidence(cluster):
    _, out, _ = run(cluster.ssh("i-0aaaa"), f"NCCL_DEBUG=INFO {TWO_NODES} -x NCCL_DEBUG sendrecv_perf -b 1M -e 1M -g 8")
    assert "NET/OFI Selected Provider is efa" in out and "Using network Libfabric" in out
    assert "NET/Libfabric/0/GDRDMA" in out and "NET/Socket" not in out


def test_without_efa_evidence_nccl_falls_back_to_sockets(cluster):
    cluster.set_faults("127.0.0.12", no_efa_evidence=True)
    _, out, _ = run(cluster.ssh("i-0aaaa"), f"NCCL_DEBUG=INFO {TWO_NODES} all_reduce_perf -b 1G -e 1G -g 8")
    assert "NET/Socket" in out and "Using network Socket" in out
    assert busbw_at(out, 1 << 30) < 20


def test_a_slow_link_on_one_participant_slows_the_pair(cluster):
    cluster.set_faults("i-0bbbb", slow_link=4)
    _, out, _ = run(cluster.ssh("i-0aaaa"), f"{TWO_NODES} all_reduce_perf -b 8G -e 8G -g 8")
    assert 90 <= busbw_at(out, 8 << 30) <= 100
    _, alone, _ = run(cluster.ssh("i-0bbbb"), "all_reduce_perf -b 8G -e 8G -g 8")
    assert busbw_at(alone, 8 << 30) > 470  # NVLink inside the node is not the slow link


def test_wrong_results_fail_the_run(cluster):
    cluster.set_faults("127.0.0.12", nccl_wrong=3)
    code, out, err = run(cluster.ssh("i-0aaaa"), f"{TWO_NODES} all_reduce_perf -b 1M -e 4M -f 2 -g 8")
    assert code != 0 and "mpirun detected that one or more processes exited with non-zero status" in err
    assert all(m.group(9) == "3" for m in rows(out))
    assert re.search(r"^# Out of bounds values : \d+ FAILED$", out, re.M)


def test_an_unreachable_participant_fails_mpirun(cluster):
    cluster.set_faults("127.0.0.12", unreachable=True)
    code, out, err = run(cluster.ssh("i-0aaaa"), f"{TWO_NODES} all_reduce_perf -b 1M -e 1M -g 8")
    assert code != 0 and out == "" and "ORTE was unable to reliably start one or more daemons" in err


def test_an_unknown_host_fails_mpirun(cluster):
    code, _, err = run(cluster.ssh("i-0aaaa"), "mpirun -np 2 --host 127.0.0.11,no-such-node all_reduce_perf -g 8")
    assert code != 0 and "Could not resolve hostname no-such-node" in err


def test_asking_for_more_gpus_than_the_node_has_fails(cluster):
    cluster.set_faults("i-0bbbb", gpus=7)
    code, _, err = run(cluster.ssh("i-0bbbb"), "all_reduce_perf -b 1M -e 1M -g 8")
    assert code != 0 and "Invalid number of GPUs: 8 requested but only 7 were found." in err
