"""fi_info -p efa -t FI_EP_RDM listings: entries, EFA devices, efa vs efa-direct fabrics."""

import json

import pytest

from tasks.errors import ParseError
from tasks.parsing.fi_info import parse_fi_info, to_json
from tests.unit.parsing.samples import read


def test_the_efa_start_sample_is_one_rdm_entry_with_every_field():
    (entry,) = parse_fi_info(read("fi_info_efa_start.txt")).entries
    assert (entry.provider, entry.fabric, entry.domain, entry.version, entry.ep_type, entry.protocol) == (
        "efa", "EFA-fe80::94:3dff:fe89:1b70", "efa_0-rdm", "2.0", "FI_EP_RDM", "FI_PROTO_EFA")
    assert entry.device == "efa_0"


def test_libfabric_2_lists_efa_direct_first_and_a_device_is_counted_once():
    result = parse_fi_info(read("fi_info_libfabric2_one_nic.txt"))
    assert len(result.entries) == 3
    assert result.fabrics() == ("efa-direct", "efa")
    assert result.devices() == ("rdmap49s0",) and result.device_count() == 1
    assert result.devices(ep_type="FI_EP_DGRAM") == ("rdmap49s0",)


def test_a_p5en_shows_16_efa_devices():
    result = parse_fi_info(read("fi_info_p5en_16_nics.txt"))
    assert len(result.entries) == 32 and result.device_count() == 16
    assert result.devices()[0] == "rdmap79s0"


def test_a_node_missing_one_nic_shows_15():
    text = read("fi_info_p5en_16_nics.txt").replace("rdmap167s0-rdm", "rdmap79s0-rdm")
    assert parse_fi_info(text).device_count() == 15


def test_the_tcp_stand_in_recorded_here_is_counted_under_its_own_provider():
    result = parse_fi_info(read("fi_info_tcp_rxm_libfabric117.txt"))
    assert result.entries[0].provider == "tcp;ofi_rxm" and result.entries[0].core_provider == "tcp"
    assert "lo" in result.devices("tcp")
    assert result.device_count("efa") == 0


def test_no_matching_provider_is_an_empty_listing_with_the_error():
    result = parse_fi_info("fi_getinfo: -61 (No data available)\n")
    assert result.entries == () and result.error == "fi_getinfo: -61 (No data available)"
    assert result.device_count() == 0


def test_libfabric_log_lines_are_skipped():
    text = "libfabric:1234:1700000000::efa:core:efa_device_init():123<warn> slow\n" + read("fi_info_efa_start.txt")
    assert parse_fi_info(text).device_count() == 1


def test_to_json_gives_plain_json():
    data = to_json(parse_fi_info(read("fi_info_libfabric2_one_nic.txt")))
    assert json.loads(json.dumps(data)) == data
    assert data["efa_devices"] == ["rdmap49s0"] and data["efa_fabrics"] == ["efa-direct", "efa"]


@pytest.mark.parametrize("text", ["", "hello\n", "    domain: x\n", "provider: efa\nfabric efa\n"])
def test_text_that_is_not_an_fi_info_listing_is_a_parse_error(text):
    with pytest.raises(ParseError):
        parse_fi_info(text)
