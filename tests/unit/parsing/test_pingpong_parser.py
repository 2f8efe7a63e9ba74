"""fi_pingpong tables and failures, with and without launcher tags, aware of the exit code."""

import json

import pytest

from tasks.errors import ParseError
from tasks.parsing.pingpong import parse_pingpong, to_json
from tests.unit.parsing.samples import read


def test_the_two_rank_sample_gives_one_table_per_rank():
    result = parse_pingpong(read("fi_pingpong_modal_2x_h100.txt"))
    assert [(t.label, len(t.rows)) for t in result.tables] == [("rank 1", 4), ("rank 0", 4)]
    first = result.tables[0].rows[0]
    assert (first.size_bytes, first.sent, first.acked, first.lost) == (64, 10, 10, 0)
    assert (first.total_bytes, first.time_s, first.mb_per_s, first.usec_per_xfer) == (1228, 0.0, 1.77, 36.25)
    assert [r.size_bytes for r in result.tables[1].rows] == [64, 256, 1024, 4096]
    assert result.ok


def test_latency_is_the_best_small_message_figure_not_the_first_one_that_pays_for_setup():
    result = parse_pingpong(read("fi_pingpong_efa_test_loopback.txt"))
    assert [t.label for t in result.tables] == ["Server", "Client"]
    assert result.rows[0].usec_per_xfer == 803.40
    assert result.latency_us() == 8.00
    assert result.latency_us(max_size_bytes=64) == 803.40


def test_sizes_and_totals_with_m_suffixes_are_binary():
    rows = parse_pingpong(read("fi_pingpong_efa_test_loopback.txt")).rows
    assert rows[4].size_bytes == 65536 and rows[4].total_bytes == int(1.2 * (1 << 20))
    assert rows[5].size_bytes == 1 << 20 and rows[5].total_bytes == 20 << 20


def test_a_real_libfabric_run_recorded_here_parses():
    result = parse_pingpong(read("fi_pingpong_tcp_server_libfabric117.txt"), exit_code=0)
    assert len(result.rows) == 6 and result.rows[0].sent == 100
    assert result.latency_us() == 6.72 and result.ok


def test_lost_messages_and_the_timeout_line_are_failures():
    result = parse_pingpong(read("fi_pingpong_lost_and_timeout.txt"))
    lost = result.rows[1]
    assert (lost.sent, lost.acked, lost.lost) == (10000, 9997, 3)
    assert result.rows[0].sent == 10000  # '10k' counts are decimal
    assert result.timeout_s == 5 and result.timed_out and result.lost == 3
    assert not result.ok
    assert "no completion within 5 s (timeout expired)" in result.failures()


def test_extra_acks_are_not_counted_as_lost():
    text = "bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec\n" \
           "64      10      -2       1.2k        0.00s      1.77      36.25       0.03\n"
    row = parse_pingpong(text).rows[0]
    assert (row.acked, row.lost) == (12, 0)


def test_exit_code_124_means_the_run_was_stopped_by_timeout():
    result = parse_pingpong(read("fi_pingpong_modal_2x_h100.txt"), exit_code=124)
    assert result.timed_out and not result.ok
    assert result.failures()[0] == "exit code 124 (stopped by timeout)"


def test_a_non_zero_exit_fails_even_with_a_clean_table():
    result = parse_pingpong(read("fi_pingpong_modal_2x_h100.txt"), exit_code=1)
    assert not result.ok and "exit code 1" in result.failures()
    assert result.failures(include_exit_code=False) == ()


def test_a_failed_run_with_unreadable_output_is_a_result_not_an_error():
    result = parse_pingpong("bash: fi_pingpong: command not found\n", exit_code=127)
    assert result.rows == () and result.failures() == ("exit code 127",)


def test_the_connect_error_of_a_real_run_is_kept():
    result = parse_pingpong(read("fi_pingpong_connect_refused_libfabric117.txt"), exit_code=111)
    assert result.errors == ("util/pingpong.c:408 : failed to connect: Connection refused",)
    assert not result.ok


def test_data_integrity_errors_are_failures():
    text = read("fi_pingpong_modal_2x_h100.txt") + "[rank 1] Error at iteration=3 size=256 byte=17\n"
    result = parse_pingpong(text, exit_code=0)
    assert result.integrity_errors == ("Error at iteration=3 size=256 byte=17",)
    assert not result.ok


def test_the_named_variant_of_the_table_is_read():
    text = "name      bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec\n" \
           "64_lat    64      10      =10      1.2k        0.00s      1.77      36.25       0.03\n"
    row = parse_pingpong(text).rows[0]
    assert row.name == "64_lat" and row.size_bytes == 64


def test_to_json_gives_plain_json_with_the_verdict_inputs():
    data = to_json(parse_pingpong(read("fi_pingpong_lost_and_timeout.txt"), exit_code=1))
    assert json.loads(json.dumps(data)) == data
    assert data["ok"] is False and data["lost"] == 3 and data["latency_us"] == 9.57
    assert data["tables"][0]["rows"][1]["lost"] == 3


@pytest.mark.parametrize("text", ["", "hello\n", "bytes 64 10\n"])
def test_a_clean_exit_without_any_table_is_a_parse_error(text):
    with pytest.raises(ParseError):
        parse_pingpong(text, exit_code=0)


@pytest.mark.parametrize("row", [
    "64      10      =10      1.2k        0.00      1.77      36.25       0.03",
    "64      10      =10      1.2x        0.00s     1.77      36.25       0.03",
    "64      ten     =10      1.2k        0.00s     1.77      36.25       0.03",
    "64      10      =10      1.2k        0.00s     1.77      36.25",
])
def test_a_malformed_row_is_a_parse_error(row):
    with pytest.raises(ParseError):
        parse_pingpong("bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec\n" + row)


def test_an_exit_code_that_is_not_an_integer_is_a_parse_error():
    with pytest.raises(ParseError):
        parse_pingpong(read("fi_pingpong_modal_2x_h100.txt"), exit_code="0")  # type: ignore[arg-type]


def test_lines_tagged_by_mpirun_are_grouped_by_rank():
    text = "".join(f"[1,{r}]<stdout>:{line}\n" for r in (0, 1) for line in read(
        "fi_pingpong_tcp_server_libfabric117.txt").splitlines())
    result = parse_pingpong(text, exit_code=0)
    assert [(t.label, len(t.rows)) for t in result.tables] == [("1,0", 6), ("1,1", 6)]
