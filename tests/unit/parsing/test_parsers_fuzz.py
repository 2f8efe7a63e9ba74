"""Whatever text a node sends back, a parser returns a result or raises ParseError: nothing else.

Three kinds of input per parser: arbitrary text, text assembled from the tools' own vocabulary
(so it gets past the first line checks), and published samples mutated at random.
"""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tasks.errors import ParseError
from tasks.parsing import fi_info, nccl_json, nccl_tests, nvidia_smi, pingpong
from tests.unit.parsing.samples import names, read

FUZZ = settings(max_examples=120, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

VOCABULARY = [
    "#", "# ", "0:", "[1,0]<stdout>:", "[rank 1]", " .. ", ":", ",", "-1", "0", "1", "8", "64", "1.2k",
    "10k", "=10", "+3", "-2", "0.00s", "N/A", "nan", "-nan", "inf", "1e+06", "2e-07", "float",
    "bfloat16", "sum", "none", "size", "count", "type", "redop", "root", "time", "algbw", "busbw",
    "#wrong", "error", "i_min", "timestamp", "bytes", "#sent", "#ack", "total", "MB/sec", "usec/xfer",
    "Mxfers/sec", "Rank", "Group", "Pid", "on", "device", "[0x59]", "[0000:53:00]", "NVIDIA H200",
    "Out of bounds values :", "OK", "FAILED", "Avg bus bandwidth    :", "Collective test concluded:",
    "nThread 1 nGpus 8 minBytes 8 maxBytes 8", "Test NCCL failure common.cu:961 'x'",
    "Test CUDA failure", "Test failure common.cu:844", "Test timeout (30s) common.cu:312", "pid 75:",
    "NCCL INFO", "NCCL WARN", "NET/OFI Selected provider is efa", "Using network Libfabric",
    "via NET/Libfabric/0/GDRDMA", "NET/Socket/0", "5s timeout expired", "Error at iteration=1 size=2 byte=3",
    "[error]", "provider:", "    fabric:", "    domain:", "rdmap16s27-rdm", "    type:", "FI_EP_RDM",
    "fi_getinfo: -61", "index", "name", "uuid", "memory.total [MiB]", "143771 MiB", "[N/A]", "GPU 0:",
    "(UUID: GPU-1)", "MIG", "{", "}", "[", "]", '"', "results", "size", "null", "true", '"nan"',
    "\n", "\n", "\n", "  ", "\t",
]

vocab_text = st.lists(st.sampled_from(VOCABULARY), max_size=120).map(" ".join)


@st.composite
def mutated(draw, samples: list[str]) -> str:
    text = read(draw(st.sampled_from(samples)))
    for _ in range(draw(st.integers(1, 6))):
        if not text:
            break
        op = draw(st.sampled_from(["delete", "insert", "replace", "truncate", "duplicate"]))
        i = draw(st.integers(0, len(text) - 1))
        j = min(len(text), i + draw(st.integers(1, 40)))
        payload = draw(st.one_of(st.sampled_from(VOCABULARY), st.text(max_size=12)))
        if op == "delete":
            text = text[:i] + text[j:]
        elif op == "insert":
            text = text[:i] + payload + text[i:]
        elif op == "replace":
            text = text[:i] + payload + text[j:]
        elif op == "truncate":
            text = text[:i]
        else:
            text = text[:j] + text[i:j] + text[j:]
    return text


def _nccl(text):
    result = nccl_tests.parse_nccl_tests(text)
    result.hard_failures()
    nccl_tests.busbw_at(result, 1 << 30)
    nccl_tests.busbw_at(result, 8, "in_place")
    return nccl_tests.to_json(result)


def _json_with_log(text):
    return nccl_tests.to_json(nccl_json.with_log(nccl_json.parse_nccl_json(read("nccl_sendrecv_pair.json")), text))


def _pingpong(text, exit_code=None):
    result = pingpong.parse_pingpong(text, exit_code)
    result.failures()
    result.latency_us()
    return pingpong.to_json(result)


def _fi_info(text):
    result = fi_info.parse_fi_info(text)
    result.device_count()
    return fi_info.to_json(result)


def _nvidia_smi(text):
    return nvidia_smi.to_json(nvidia_smi.parse_nvidia_smi(text))


def only_parse_error(parse, text, *args):
    """Run the parser; a ParseError is an allowed answer, any other exception fails the test."""
    try:
        data = parse(text, *args)
    except ParseError:
        return
    json.dumps(data, allow_nan=False)  # what the CLI prints must be strict JSON


NCCL_SAMPLES = names("nccl_")
PINGPONG_SAMPLES = names("fi_pingpong_")
FI_INFO_SAMPLES = names("fi_info_")
NVIDIA_SMI_SAMPLES = names("nvidia_smi_")


@FUZZ
@given(st.one_of(st.text(max_size=400), vocab_text))
def test_nccl_parser_on_arbitrary_text_raises_nothing_but_parse_error(text):
    only_parse_error(_nccl, text)
    only_parse_error(_json_with_log, text)


@FUZZ
@given(mutated(NCCL_SAMPLES))
def test_nccl_parser_on_mutated_published_samples_raises_nothing_but_parse_error(text):
    only_parse_error(_nccl, text)


@FUZZ
@given(st.one_of(st.text(max_size=400), vocab_text), st.one_of(st.none(), st.integers(-300, 300)))
def test_pingpong_parser_on_arbitrary_text_raises_nothing_but_parse_error(text, exit_code):
    only_parse_error(_pingpong, text, exit_code)


@FUZZ
@given(mutated(PINGPONG_SAMPLES), st.one_of(st.none(), st.sampled_from([0, 1, 124])))
def test_pingpong_parser_on_mutated_published_samples_raises_nothing_but_parse_error(text, exit_code):
    only_parse_error(_pingpong, text, exit_code)


@FUZZ
@given(st.one_of(st.text(max_size=400), vocab_text, mutated(FI_INFO_SAMPLES)))
def test_fi_info_parser_raises_nothing_but_parse_error(text):
    only_parse_error(_fi_info, text)


@FUZZ
@given(st.one_of(st.text(max_size=400), vocab_text, mutated(NVIDIA_SMI_SAMPLES)))
def test_nvidia_smi_parser_raises_nothing_but_parse_error(text):
    only_parse_error(_nvidia_smi, text)


def test_the_fuzzers_draw_from_every_published_sample():
    assert len(NCCL_SAMPLES) >= 8 and len(PINGPONG_SAMPLES) >= 4
    assert len(FI_INFO_SAMPLES) >= 3 and len(NVIDIA_SMI_SAMPLES) >= 3


_JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-(10**400), 10**400), st.floats(),
                       st.text(max_size=8), st.sampled_from(["nan", "true", "false", "unchecked", "   -1"]))
_JSON_VALUE = st.recursive(_JSON_LEAF, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)), max_leaves=6)
_JSON_PLACES = {
    "results": ("results",), "config": ("config",), "out_of_bounds": ("out_of_bounds",),
    "average_bus_bandwidth": ("average_bus_bandwidth",), "errors": ("errors",), "args": ("args",),
    "nccl_version": ("nccl_version",), "device": ("config", "devices", 0), "row": ("results", 0),
    "out_of_place": ("results", 1, "out_of_place"), "nwrong": ("results", 2, "in_place", "nwrong"),
    "root": ("results", 3, "root"),
}


def _set(doc, path, value):
    """Put value at path, unless an earlier change already removed the way there."""
    node = doc
    for key in path[:-1]:
        if isinstance(key, int) and not (isinstance(node, list) and len(node) > key):
            return
        if isinstance(key, str) and not (isinstance(node, dict) and key in node):
            return
        node = node[key]
    if isinstance(path[-1], int) and not (isinstance(node, list) and len(node) > path[-1]):
        return
    if isinstance(path[-1], str) and not isinstance(node, dict):
        return
    node[path[-1]] = value


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(sorted(_JSON_PLACES)), _JSON_VALUE), min_size=1, max_size=4))
def test_nccl_json_parser_on_structurally_mutated_documents_raises_nothing_but_parse_error(changes):
    doc = json.loads(read("nccl_sendrecv_pair.json"))
    for place, value in changes:
        _set(doc, _JSON_PLACES[place], value)
    only_parse_error(_nccl, json.dumps(doc))


@pytest.mark.timeout(30)
@pytest.mark.parametrize("line", [
    "a" * 200_000 + " Test", "a" * 200_000 + " NCCL INFO x", ".. " * 70_000 + "Test failure a:1",
    "a:" * 100_000 + " Test timeout (3s)", "x:1:2 [0] " * 20_000 + "NCCL INFO",
])
def test_a_hostile_long_line_is_read_in_linear_time(line):
    # A backtracking pattern took 11 s on 20,000 characters; this is ten times longer.
    only_parse_error(_nccl, line)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("parse, text", [
    (_nvidia_smi, "index, " + "a [ " * 100_000), (_nvidia_smi, "GPU 0:" + " (" * 100_000),
    (_pingpong, "64 10 =10 " + "1.2k " * 100_000), (_fi_info, "provider: " + "a " * 100_000),
])
def test_other_parsers_read_a_hostile_long_line_in_linear_time(parse, text):
    only_parse_error(parse, text)
