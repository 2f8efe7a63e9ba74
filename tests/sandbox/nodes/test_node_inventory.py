"""Inventory on a sandbox node: nvidia-smi and fi_info -p efa print what a p5en prints, and the
per-node faults change what they see."""

from __future__ import annotations

import csv
import io

import pytest

from tests.sandbox.nodes.helpers import run

pytestmark = pytest.mark.sandbox

QUERY = "nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total,pci.bus_id --format=csv"


def gpu_rows(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text), skipinitialspace=True))


def test_nvidia_smi_lists_eight_h200s_in_csv(cluster):
    code, out, _ = run(cluster.ssh("i-0aaaa"), QUERY)
    rows = gpu_rows(out)
    assert code == 0 and len(rows) == 8
    assert {r["name"] for r in rows} == {"NVIDIA H200"}
    assert {r["memory.total [MiB]"] for r in rows} == {"143771 MiB"}
    assert [r["index"] for r in rows] == [str(i) for i in range(8)]
    assert len({r["uuid"] for r in rows}) == 8 and all(r["uuid"].startswith("GPU-") for r in rows)


def test_nvidia_smi_noheader_nounits_prints_bare_values(cluster):
    code, out, _ = run(cluster.ssh("i-0aaaa"), "nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits")
    assert code == 0 and out.splitlines() == ["NVIDIA H200, 143771"] * 8


def test_gpu_uuids_differ_between_nodes(cluster):
    a = {r["uuid"] for r in gpu_rows(run(cluster.ssh("i-0aaaa"), QUERY)[1])}
    b = {r["uuid"] for r in gpu_rows(run(cluster.ssh("i-0bbbb"), QUERY)[1])}
    assert not a & b


def test_a_lost_gpu_fault_leaves_seven(cluster):
    cluster.set_faults("127.0.0.12", gpus=7)
    assert len(gpu_rows(run(cluster.ssh("i-0bbbb"), QUERY)[1])) == 7
    assert len(run(cluster.ssh("i-0bbbb"), "nvidia-smi -L")[1].splitlines()) == 7
    assert len(gpu_rows(run(cluster.ssh("i-0aaaa"), QUERY)[1])) == 8


def test_an_unknown_query_field_is_an_error(cluster):
    code, _, err = run(cluster.ssh("i-0aaaa"), "nvidia-smi --query-gpu=bogus --format=csv")
    assert code != 0 and 'Field "bogus" is not a valid field to query.' in err


def efa_domains(text: str) -> list[str]:
    return [line.split(":", 1)[1].strip() for line in text.splitlines() if line.strip().startswith("domain:")]


def test_fi_info_lists_sixteen_efa_rdm_domains(cluster):
    code, out, _ = run(cluster.ssh("i-0aaaa"), "fi_info -p efa -t FI_EP_RDM")
    domains = efa_domains(out)
    assert code == 0 and len(domains) == 16 and len(set(domains)) == 16
    assert all(d.startswith("rdmap") and d.endswith("s0-rdm") for d in domains)
    assert out.count("provider: efa") == 16 and out.count("type: FI_EP_RDM") == 16


def test_an_efa_device_fault_leaves_fifteen_domains(cluster):
    cluster.set_faults("i-0bbbb", efa_devices=15)
    assert len(efa_domains(run(cluster.ssh("i-0bbbb"), "fi_info -p efa -t FI_EP_RDM")[1])) == 15


def test_other_fi_info_calls_reach_the_real_libfabric(cluster):
    code, out, _ = run(cluster.ssh("i-0aaaa"), "fi_info --version")
    assert code == 0 and "libfabric:" in out
