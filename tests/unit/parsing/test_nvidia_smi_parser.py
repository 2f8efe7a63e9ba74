"""nvidia-smi --query-gpu CSV (with/without header and units) and nvidia-smi -L."""

import json

import pytest

from tasks.errors import ParseError
from tasks.parsing.nvidia_smi import parse_nvidia_smi, to_json
from tests.unit.parsing.samples import read


def test_the_csv_with_header_and_units_gives_eight_h200s():
    inv = parse_nvidia_smi(read("nvidia_smi_query_p5en.csv"))
    assert len(inv.gpus) == 8 and inv.error is None
    gpu = inv.gpus[7]
    assert (gpu.index, gpu.name, gpu.driver_version, gpu.memory_total_mib, gpu.pci_bus_id) == (
        7, "NVIDIA H200", "570.133.20", 143771, "00000000:CA:00.0")
    assert gpu.uuid.startswith("GPU-")
    assert inv.models == ("NVIDIA H200",) and inv.driver_versions == ("570.133.20",)


def test_noheader_nounits_reads_the_same_as_the_full_form():
    assert parse_nvidia_smi(read("nvidia_smi_query_p5en_noheader_nounits.csv")) == \
        parse_nvidia_smi(read("nvidia_smi_query_p5en.csv"))


def test_a_header_in_another_order_is_followed():
    inv = parse_nvidia_smi("name, index, memory.total [MiB]\nNVIDIA H200, 3, 143771 MiB\n")
    assert (inv.gpus[0].index, inv.gpus[0].name, inv.gpus[0].memory_total_mib) == (3, "NVIDIA H200", 143771)


def test_the_list_form_gives_index_name_and_uuid():
    inv = parse_nvidia_smi(read("nvidia_smi_L_p5en.txt"))
    assert [g.index for g in inv.gpus] == list(range(8))
    assert inv.gpus[0].name == "NVIDIA H200" and inv.gpus[0].uuid.startswith("GPU-")


def test_mig_lines_under_a_gpu_are_not_gpus():
    text = "GPU 0: NVIDIA H200 (UUID: GPU-1)\n  MIG 3g.71gb     Device  0: (UUID: MIG-2)\n"
    assert len(parse_nvidia_smi(text).gpus) == 1


def test_unavailable_values_become_none():
    inv = parse_nvidia_smi("0, NVIDIA H200, [N/A], 570.133.20, [N/A], 00000000:53:00.0\n")
    assert inv.gpus[0].uuid is None and inv.gpus[0].memory_total_mib is None


def test_nvidia_smis_own_failure_is_an_empty_inventory_with_the_message():
    inv = parse_nvidia_smi("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                           "Make sure that the latest NVIDIA driver is installed and running.\n")
    assert inv.gpus == () and inv.error.startswith("NVIDIA-SMI has failed")
    assert parse_nvidia_smi("No devices were found\n").gpus == ()


def test_to_json_gives_plain_json():
    data = to_json(parse_nvidia_smi(read("nvidia_smi_query_p5en.csv")))
    assert json.loads(json.dumps(data)) == data and data["count"] == 8


@pytest.mark.parametrize("text", [
    "", "hello\n", "0, NVIDIA H200\n", "x, NVIDIA H200, GPU-1, 570, 1 MiB, 0000\n",
    "0, NVIDIA H200, GPU-1, 570, lots, 0000\n", "0, a, b, c, 1, d\n0, a, b, c, 1, d\n",
])
def test_text_that_is_not_an_inventory_is_a_parse_error(text):
    with pytest.raises(ParseError):
        parse_nvidia_smi(text)


def test_a_recorded_h200_inventory_reads_as_one_gpu_of_143771_mib():
    inventory = parse_nvidia_smi(read("nvidia_smi_query_h200_recorded.csv"))
    [gpu] = inventory.gpus
    assert gpu.name == "NVIDIA H200" and gpu.memory_total_mib == 143771 and gpu.driver_version == "580.159.04"
    assert gpu.uuid in read("nvidia_smi_L_h200_recorded.txt")
