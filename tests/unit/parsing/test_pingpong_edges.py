"""fi_pingpong's output at its edges (``tasks.parsing.pingpong``): every size and count suffix,
tables per section and per header, the error lines kept and how much of them, and the failures in
the order a report lists them."""

from __future__ import annotations

import math

import pytest

from tasks.errors import ParseError
from tasks.parsing.pingpong import MAX_KEPT_LINES, parse_pingpong, to_json

HEADER = "bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec"


def row(size: str = "64", sent: str = "10", ack: str = "=10", total: str = "1.2k", time: str = "0.00s",
        mbs: str = "1.77", usec: str = "36.25", mx: str = "0.03") -> str:
    return f"{size}  {sent}  {ack}  {total}  {time}  {mbs}  {usec}  {mx}"


def one(line: str, **kw):
    (r,) = parse_pingpong(f"{HEADER}\n{line}\n", **kw).rows
    return r


@pytest.mark.parametrize("token, size", [("64", 64), ("1k", 1024), ("1.5k", 1536), ("2m", 2 << 20),
                                         ("1.2m", int(1.2 * (1 << 20))), ("1g", 1 << 30), ("9.9g", int(9.9 * (1 << 30)))])
def test_sizes_are_binary_with_one_decimal(token, size):
    assert one(row(size=token, total=token)).size_bytes == size
    assert one(row(total=token)).total_bytes == size


@pytest.mark.parametrize("token, count", [("10", 10), ("10k", 10_000), ("3m", 3_000_000), ("2b", 2_000_000_000)])
def test_counts_are_decimal(token, count):
    r = one(row(sent=token, ack="=" + token))
    assert (r.sent, r.acked, r.lost) == (count, count, 0)


def test_a_plus_ack_counts_messages_lost_and_a_minus_ack_extra_acks():
    assert (lambda r: (r.acked, r.lost))(one(row(sent="10k", ack="+2k"))) == (8000, 2000)
    assert (lambda r: (r.acked, r.lost))(one(row(sent="10", ack="-3"))) == (13, 0)


def test_each_figure_of_a_row_is_read_into_its_column():
    r = one(row(time="1.25s", mbs="13.37", usec="9.57", mx="0.10"))
    assert (r.time_s, r.mb_per_s, r.usec_per_xfer, r.mxfers_per_s, r.name) == (1.25, 13.37, 9.57, 0.10, None)


def test_figures_the_tool_prints_as_nan_are_kept_as_nan():
    r = one(row(mbs="nan", usec="inf", mx="-nan"))
    assert math.isnan(r.mb_per_s) and math.isinf(r.usec_per_xfer) and math.isnan(r.mxfers_per_s)


@pytest.mark.parametrize("bad", [row(size="1.25k"), row(size="-1"), row(sent="1.5k"),
                                 row(time="nans"), row(total="1k2"), row(mbs="fast"), "x " + row() + " y"])
def test_a_row_that_does_not_read_is_a_parse_error_naming_its_line(bad):
    with pytest.raises(ParseError, match="^line 2: "):
        parse_pingpong(f"{HEADER}\n{bad}\n")


def test_a_row_with_the_wrong_number_of_columns_says_how_many_it_expected():
    with pytest.raises(ParseError, match=r"line 2: expected 8 columns \(bytes #sent #ack total time MB/sec "
                                         r"usec/xfer Mxfers/sec\), found 7"):
        parse_pingpong(f"{HEADER}\n{row().rsplit(' ', 1)[0]}\n")


@pytest.mark.parametrize("line", [row(ack="10"), row(ack="~10"), "64 10"])
def test_a_line_without_an_ack_column_is_chatter_not_a_row(line):
    assert parse_pingpong(f"{HEADER}\n{line}\n", exit_code=0).rows == ()


def test_a_named_row_is_a_row_even_without_its_header():
    text = "name      bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec\n" \
           f"lat_64 {row()}\n"
    assert parse_pingpong(text).rows[0].name == "lat_64"
    assert parse_pingpong(f"lat_64 {row()}\n").rows[0].name == "lat_64"


def test_a_row_before_any_header_still_makes_a_table():
    result = parse_pingpong(row() + "\n")
    assert [(t.label, len(t.rows)) for t in result.tables] == [(None, 1)]


def test_a_second_header_under_the_same_label_starts_a_second_table():
    result = parse_pingpong(f"{HEADER}\n{row('64')}\n{HEADER}\n{row('256')}\n{row('1k')}\n")
    assert [[r.size_bytes for r in t.rows] for t in result.tables] == [[64], [256, 1024]]


def test_section_lines_label_their_tables_whatever_their_case():
    result = parse_pingpong(f"server log:\n{HEADER}\n{row()}\nCLIENT LOG:\n{HEADER}\n{row()}\n")
    assert [t.label for t in result.tables] == ["Server", "Client"]


def test_a_launcher_tag_wins_over_the_section_it_is_printed_in():
    result = parse_pingpong(f"Server Log:\n[rank 3] {HEADER}\n[rank 3] {row()}\n")
    assert [t.label for t in result.tables] == ["rank 3"]


def test_only_a_bare_header_with_exit_0_is_a_run_with_no_rows():
    result = parse_pingpong(HEADER + "\n", exit_code=0)
    assert result.rows == () and result.failures() == ("no result rows",) and not result.ok


def test_the_timeout_line_sets_the_timeout_and_a_run_with_only_it_parses():
    result = parse_pingpong("warming up\n12s timeout expired\n")
    assert result.timeout_s == 12 and result.timed_out
    assert result.failures() == ("no completion within 12 s (timeout expired)",)


def test_each_error_line_form_is_kept_as_the_tool_wrote_it():
    text = ("[error] util/pingpong.c:408: failed to connect: Connection refused\n"
            "fi_getinfo(): util/pingpong.c:1234, ret=-61 (No data available)\n")
    result = parse_pingpong(text, exit_code=1)
    assert result.errors == ("util/pingpong.c:408: failed to connect: Connection refused",
                             "fi_getinfo(): util/pingpong.c:1234, ret=-61 (No data available)")


def test_an_error_line_is_cut_at_500_characters():
    (kept,) = parse_pingpong("[error] " + "x" * 600 + "\n", exit_code=1).errors
    assert kept == "x" * 500


def test_at_most_200_error_and_integrity_lines_are_kept():
    many = "".join(f"[error] e{i}\n" for i in range(MAX_KEPT_LINES + 5))
    many += "".join(f"Error at iteration={i} size=64 byte=1\n" for i in range(MAX_KEPT_LINES + 5))
    result = parse_pingpong(many, exit_code=1)
    assert len(result.errors) == MAX_KEPT_LINES == 200 and result.errors[-1] == "e199"
    assert len(result.integrity_errors) == 200 and result.integrity_errors[0] == "Error at iteration=0 size=64 byte=1"


def test_failures_are_listed_exit_code_timeout_integrity_errors_then_lost_messages():
    text = (f"{HEADER}\n{row(ack='+1')}\n5s timeout expired\nError at iteration=1 size=64 byte=2\n"
            "[error] boom\n")
    assert parse_pingpong(text, exit_code=2).failures() == (
        "exit code 2", "no completion within 5 s (timeout expired)",
        "data integrity: Error at iteration=1 size=64 byte=2", "error: boom",
        "1 messages sent but never acknowledged")


@pytest.mark.parametrize("text", ["starting...\n", "bytes #sent\n", "12 timeout expired\n"])
def test_output_with_nothing_of_fi_pingpong_in_it_is_a_parse_error_unless_the_run_failed(text):
    with pytest.raises(ParseError, match="fi_pingpong: no fi_pingpong table or error found"):
        parse_pingpong(text)
    assert parse_pingpong(text, exit_code=3).failures() == ("exit code 3",)


@pytest.mark.parametrize("code", [True, 1.0, "1"])
def test_an_exit_code_must_be_an_integer(code):
    with pytest.raises(ParseError, match="fi_pingpong: exit code must be an integer"):
        parse_pingpong(HEADER + "\n", exit_code=code)  # type: ignore[arg-type]


def test_latency_counts_messages_up_to_4_kib_and_none_without_small_rows():
    result = parse_pingpong(f"{HEADER}\n{row('4k', usec='5.0')}\n{row('8k', usec='4.0')}\n")
    assert result.latency_us() == 5.0
    assert result.latency_us(max_size_bytes=8192) == 4.0
    assert parse_pingpong(f"{HEADER}\n{row('8k')}\n").latency_us() is None


def test_to_json_carries_the_derived_figures_and_no_nan():
    data = to_json(parse_pingpong(f"{HEADER}\n{row(usec='nan', ack='+1')}\n", exit_code=124))
    assert data["latency_us"] is None and data["timed_out"] is True and data["lost"] == 1 and data["ok"] is False
    assert data["failures"][0] == "exit code 124 (stopped by timeout)"
    assert data["exit_code"] == 124 and data["tables"][0]["rows"][0]["usec_per_xfer"] is None


# --- more boundaries ---------------------------------------------------------------------------


@pytest.mark.parametrize("column, token, message", [
    ("size", "1.25k", "bytes: '1.25k' is not a fi_pingpong size"),
    ("sent", "1.5k", "#sent: '1.5k' is not a fi_pingpong count"),
    ("total", "1k2", "total: '1k2' is not a fi_pingpong size"),
    ("time", "1.2.3s", "time: '1.2.3' is not a number"),
    ("time", "0.00", "time: '0.00' does not end in 's'"),
    ("mbs", "fast", "MB/sec: 'fast' is not a number"),
    ("usec", "fast", "usec/xfer: 'fast' is not a number"),
    ("mx", "fast", "Mxfers/sec: 'fast' is not a number"),
])
def test_a_bad_figure_is_refused_naming_its_line_and_column(column, token, message):
    with pytest.raises(ParseError) as caught:
        parse_pingpong(f"{HEADER}\n{row(**{column: token})}\n")
    assert str(caught.value) == f"line 2: {message}"


def test_a_row_whose_ack_column_is_a_plain_number_is_refused_naming_it():
    with pytest.raises(ParseError) as caught:
        parse_pingpong(f"{HEADER}\n64  10  20  =10  0.00s  1.77  36.25  0.03\n")
    assert str(caught.value) == "line 2: #ack: '20' is not =N, +N or -N"


@pytest.mark.parametrize("line, found", [("64  10  =10", 3), ("lat  64  10  =10", 4)])
def test_a_row_cut_after_its_ack_is_refused_with_its_column_count(line, found):
    with pytest.raises(ParseError, match=f"found {found}$"):
        parse_pingpong(f"{HEADER}\n{line}\n")


def test_a_message_of_4097_bytes_is_no_longer_small():
    result = parse_pingpong(f"{HEADER}\n{row('4097', usec='3.0')}\n{row('4k', usec='5.0')}\n")
    assert result.latency_us() == 5.0


def test_output_with_only_a_data_integrity_error_is_a_failed_run_not_a_parse_error():
    result = parse_pingpong("Error at iteration=3 size=256 byte=17\n")
    assert result.failures() == ("data integrity: Error at iteration=3 size=256 byte=17",)


def test_what_is_not_text_or_not_fi_pingpong_is_refused_in_the_tools_name():
    with pytest.raises(ParseError) as caught:
        parse_pingpong(b"64 10")  # type: ignore[arg-type]
    assert str(caught.value) == "fi_pingpong: expected text, got bytes"
    with pytest.raises(ParseError) as nothing:
        parse_pingpong("hello\n")
    assert str(nothing.value) == "fi_pingpong: no fi_pingpong table or error found"
