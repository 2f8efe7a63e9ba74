"""A ParseError names the line it could not read, by the number an editor, ``grep -n`` and
``sed -n Np`` give it, so an operator can go straight to it in the captured output.

Each published sample gets one malformed line (a corrupted copy of one of its own rows, or a
line that belongs to no listing), inserted after lines that carry what real captures carry:
blank lines, CRLF endings, form feeds and other characters ``str.splitlines()`` breaks at but
an editor does not. The message must say ``line N`` for that line (the first ``line N`` in it).
"""

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tasks.errors import ParseError
from tasks.parsing import fi_info, nccl_tests, nvidia_smi, pingpong
from tasks.parsing._common import is_number, split_prefixes, strip_prefixes
from tests.unit.parsing.samples import names, read

PROPERTY = settings(max_examples=100, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow])

# Characters str.splitlines() breaks a line at and an editor does not.
NOT_NEWLINES = ["\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]
BAD_TOKENS = ["x", "1.2.3", "--", "0x1f", "12,5", "?"]


def named_line(message: str) -> int | None:
    m = re.search(r"\bline (\d+)\b", message)
    return int(m[1]) if m else None


def parse_error(parse, text: str) -> str:
    with pytest.raises(ParseError) as info:
        parse(text)
    return str(info.value)


# --- one readable example per parser ---------------------------------------------------------

NCCL_HEADER = ("#       size         count      type   redop    root     time   algbw   busbw #wrong"
               "     time   algbw   busbw #wrong")
NCCL_ROW = ("           8             2     float     sum      -1    69.12    0.00    0.00      0"
            "    72.43    0.00    0.00      0")
PINGPONG_HEADER = "bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec"
PINGPONG_ROW = "64      10      =10      1.2k        0.00s      1.77      36.25       0.03"
SMI_HEADER = "index, name, uuid, driver_version, memory.total [MiB], pci.bus_id"
SMI_ROW = "0, NVIDIA H200, GPU-6513270e, 570.133.20, 143771 MiB, 00000000:53:00.0"


@pytest.mark.parametrize("parse, text, line, quoted", [
    # form feed and U+2028: str.splitlines() breaks there, an editor does not
    (nccl_tests.parse_nccl_tests, f"{NCCL_HEADER}\n\x0c\n{NCCL_ROW.replace('69.12', '69.1.2')}\n", 3, "'69.1.2'"),
    (pingpong.parse_pingpong, f"{PINGPONG_HEADER}\n\u2028\n{PINGPONG_ROW[:-4]}zero\n", 3, "'zero'"),
    (fi_info.parse_fi_info, "provider: efa\n    fabric: efa\x85\n    domain: rdmap16s27-rdm\ngarbage here\n", 4,
     "'garbage here'"),
    # blank lines: nvidia-smi numbered only the non-blank ones
    (nvidia_smi.parse_nvidia_smi, "\n\nGPU 0: NVIDIA H200 (UUID: GPU-1)\nGPU one: broken\n", 4, "'GPU one: broken'"),
    (nvidia_smi.parse_nvidia_smi, f"\n{SMI_HEADER}\n\n{SMI_ROW}\n{SMI_ROW.replace('143771 MiB', 'lots')}\n", 5,
     "'lots'"),
    (nvidia_smi.parse_nvidia_smi, f"{SMI_HEADER}\r\n{SMI_ROW}\r\n{SMI_ROW.rsplit(',', 1)[0]}\r\n", 3, "found 5"),
])
def test_the_message_names_the_malformed_line(parse, text, line, quoted):
    message = parse_error(parse, text)
    assert named_line(message) == line, message
    assert quoted in message, message


def test_a_gpu_index_listed_twice_names_both_lines():
    # It named neither: "the same GPU index is listed twice".
    message = parse_error(nvidia_smi.parse_nvidia_smi, f"{SMI_HEADER}\n{SMI_ROW}\n\n{SMI_ROW}\n")
    assert named_line(message) == 4 and "first on line 2" in message, message


# --- every published sample, one malformed line, with noise above it ----------------------------


def _nccl_row(line: str) -> bool:
    tokens = strip_prefixes(line).split()
    return (len(tokens) >= 10 and all(t.lstrip("-").isdigit() for t in tokens[:2])
            and all(is_number(t) or t == "N/A" for t in tokens[-4:]))


def _pingpong_row(line: str) -> bool:
    tokens = split_prefixes(line)[1].split()
    return len(tokens) >= 8 and tokens[2][:1] in "=+-" and is_number(tokens[-1])


def _smi_row(line: str) -> bool:
    return line.count(",") >= 2 and line.split(",")[0].strip().isdigit()


def _corrupt_last(line: str, k: int, bad: str) -> str:
    tokens = line.split()
    tokens[-k] = bad
    return " ".join(tokens)


@st.composite
def noisy(draw, lines: list[str], bad_line: str, after: int) -> tuple[str, int]:
    """(the text with ``bad_line`` inserted after line index ``after``, its 1-based line number);
    the lines above it get blank lines and characters splitlines() breaks at."""
    out = []
    for line in lines[:after + 1]:
        if draw(st.integers(0, 4)) == 0:
            line += draw(st.sampled_from(NOT_NEWLINES))
        out.append(line)
        for _ in range(draw(st.integers(0, 1))):
            out.append(draw(st.sampled_from(["", "   ", "\t", "\x0c", "\u2028"])))
    number = len(out) + 1
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    return newline.join(out + [bad_line] + lines[after + 1:]) + newline, number


def _check(parse, text: str, number: int) -> None:
    message = parse_error(parse, text)
    assert named_line(message) == number, f"{message!r}; line {number} is {text.split(chr(10))[number - 1]!r}"


def _rows(name: str, is_row) -> tuple[list[str], list[int]]:
    lines = read(name).split("\n")
    return lines, [i for i, line in enumerate(lines) if is_row(line)]


def _samples_with_rows(prefix: str, is_row) -> list[str]:
    return [n for n in names(prefix) if not n.endswith(".json") and _rows(n, is_row)[1]]


NCCL = _samples_with_rows("nccl_", _nccl_row)
PINGPONG = _samples_with_rows("fi_pingpong_", _pingpong_row)
SMI_CSV = [n for n in names("nvidia_smi_query") if _rows(n, _smi_row)[1]]
SMI_L = names("nvidia_smi_L")
FI_INFO = names("fi_info_")


def test_every_tool_has_samples_to_corrupt():
    assert len(NCCL) >= 6 and len(PINGPONG) >= 3 and len(SMI_CSV) >= 3 and len(SMI_L) >= 2 and len(FI_INFO) >= 3
    for parse, samples in ((nccl_tests.parse_nccl_tests, NCCL), (pingpong.parse_pingpong, PINGPONG),
                           (nvidia_smi.parse_nvidia_smi, SMI_CSV + SMI_L), (fi_info.parse_fi_info, FI_INFO)):
        for name in samples:
            parse(read(name))  # unmodified, each parses: the error below is the inserted line's


@pytest.mark.parametrize("parse, samples, is_row, most_cells", [
    pytest.param(nccl_tests.parse_nccl_tests, NCCL, _nccl_row, 4, id="nccl-tests"),
    pytest.param(pingpong.parse_pingpong, PINGPONG, _pingpong_row, 3, id="fi_pingpong"),
])
@PROPERTY
@given(data=st.data(), bad=st.sampled_from(BAD_TOKENS))
def test_the_corrupted_row_is_named(parse, samples, is_row, most_cells, data, bad):
    name, k = data.draw(st.sampled_from(samples)), data.draw(st.integers(1, most_cells))
    lines, rows = _rows(name, is_row)
    at = data.draw(st.sampled_from(rows))
    text, number = data.draw(noisy(lines, _corrupt_last(lines[at], k, bad), at))
    _check(parse, text, number)


@PROPERTY
@given(st.data(), st.sampled_from(SMI_CSV), st.sampled_from(["index", "memory", "columns", "twice"]))
def test_nvidia_smi_query_names_the_corrupted_row(data, name, how):
    lines, rows = _rows(name, _smi_row)
    at = data.draw(st.sampled_from(rows))
    cells = lines[at].split(",")
    if how == "index":
        cells[0] = data.draw(st.sampled_from(BAD_TOKENS))
    elif how == "memory":
        cells[4] = " lots"
    elif how == "columns":
        cells = cells[:-1]
    text, number = data.draw(noisy(lines, ",".join(cells), at))
    _check(nvidia_smi.parse_nvidia_smi, text, number)


def _any_line(lines: list[str]) -> int:
    return len(lines) - 1


def _any_listed_line(lines: list[str]) -> int:
    return len([line for line in lines if line.strip()]) - 1


@pytest.mark.parametrize("parse, samples, foreign, last_at", [
    pytest.param(fi_info.parse_fi_info, FI_INFO, ["garbage here", "fabric: efa", "provider:", "x: y"], _any_line,
                 id="fi_info"),
    pytest.param(nvidia_smi.parse_nvidia_smi, SMI_L, ["GPU one: broken", "GPU 0 H200", "garbage"], _any_listed_line,
                 id="nvidia-smi-L"),
])
@PROPERTY
@given(data=st.data())
def test_the_line_that_is_not_part_of_the_listing_is_named(parse, samples, foreign, last_at, data):
    lines = read(data.draw(st.sampled_from(samples))).split("\n")
    at = data.draw(st.integers(0, last_at(lines)))
    text, number = data.draw(noisy(lines, data.draw(st.sampled_from(foreign)), at))
    _check(parse, text, number)
