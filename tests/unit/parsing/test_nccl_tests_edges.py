"""nccl-tests output at its edges (``tasks.parsing.nccl_tests``, ``tasks.parsing.nccl_model``): the
preamble and footer fields, OK/FAILED suffixes, the error lines kept, the reasons a run fails in the
words a report prints, and the bus bandwidth at a size for each placement."""

from __future__ import annotations

import math

import pytest

from tasks.errors import ParseError
from tasks.parsing.nccl_model import (
    FatalError, IncompleteRow, Measurement, NcclConfig, NcclResult, NcclRow, NetEvidence, RankInfo, busbw_at, to_json,
)
from tasks.parsing.nccl_tests import parse_nccl_tests, parse_nccl_text
from tests.unit.parsing.samples import read

HEADER = ("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   "
          "busbw #wrong\n"
          "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  "
          "(GB/s)\n")
ROWS = ("        1024           256     float     sum      -1    10.00    0.10    0.19      0    10.00    0.10    "
        "0.19      0\n"
        "  1073741824     268435456     float     sum      -1  2400.00  447.39  838.86      0  2401.00  447.20  "
        "838.50      0\n")
PREAMBLE = ("# nccl-tests version 2.17.1 nccl-headers=22703 nccl-library=22703\n"
            "# Collective test starting: all_reduce_perf\n"
            "# nThread 1 nGpus 8 minBytes 1024 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20 "
            "agg iters: 1 validation: 1 graph: 0\n"
            "#\n# Using devices\n"
            "#  Rank  0 Group  0 Pid   1234 on     node-a device  0 [0x53] NVIDIA H200\n"
            "#  Rank  1 Pid   1235 on     node-b device  1 [0000:64:00] NVIDIA H200 \n"
            "#  Rank  2 Group  0 Pid   1236 on     node-a device  2 [0x75] NVIDIA H200\n"
            "NCCL version 2.27.3+cuda12.9\n")
FOOTER = "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 419.5 \n#\n# Collective test concluded: all_reduce_perf\n"
WHOLE = PREAMBLE + HEADER + ROWS + FOOTER


def test_the_preamble_is_read_field_by_field():
    r = parse_nccl_text(WHOLE)
    assert (r.nccl_tests_version, r.nccl_version, r.collective) == ("2.17.1", "2.27.3+cuda12.9", "all_reduce_perf")
    assert r.config == NcclConfig(n_threads=1, n_gpus=8, min_bytes=1024, max_bytes=1073741824, warmup_iters=5,
                                  iters=20, validation=1, graph=0)


def test_each_rank_line_names_its_host_gpu_and_process_with_or_without_a_group():
    r = parse_nccl_text(WHOLE)
    assert r.ranks[0] == RankInfo(rank=0, host="node-a", device=0, pid=1234, group=0, bus_id="0x53",
                                  device_name="NVIDIA H200")
    assert r.ranks[1] == RankInfo(rank=1, host="node-b", device=1, pid=1235, group=None, bus_id="0000:64:00",
                                  device_name="NVIDIA H200")
    assert r.hosts == ("node-a", "node-b")


def test_the_footer_and_the_conclusion_are_read():
    r = parse_nccl_text(WHOLE)
    assert (r.out_of_bounds, r.out_of_bounds_ok, r.avg_busbw_gbs, r.avg_busbw_ok, r.concluded) == (
        0, True, 419.5, None, True)
    assert r.complete and r.column_format == "wrong" and r.hard_failures() == ()


def test_each_row_keeps_both_placements():
    row = parse_nccl_text(WHOLE).rows[1]
    assert (row.size_bytes, row.count, row.dtype, row.redop, row.root) == (1073741824, 268435456, "float", "sum", -1)
    assert row.out_of_place == Measurement(2400.0, 447.39, 838.86, 0)
    assert row.in_place == Measurement(2401.0, 447.2, 838.5, 0)
    assert row.measurement("in_place") is row.in_place and row.measurement("out_of_place") is row.out_of_place


@pytest.mark.parametrize("line, ok", [("# Out of bounds values : 2 FAILED", False), ("# Out of bounds values : 0 OK", True),
                                      ("# Out of bounds values : 0", None)])
def test_the_out_of_bounds_suffix_is_read_when_printed(line, ok):
    r = parse_nccl_text(PREAMBLE + HEADER + ROWS + line + "\n")
    assert r.out_of_bounds_ok is ok


@pytest.mark.parametrize("line, ok", [("# Avg bus bandwidth    : 10.5 FAILED", False),
                                      ("# Avg bus bandwidth    : 10.5 OK", True)])
def test_the_average_bandwidth_check_suffix_is_read_when_printed(line, ok):
    r = parse_nccl_text(PREAMBLE + HEADER + ROWS + "# Out of bounds values : 0 OK\n" + line + "\n")
    assert (r.avg_busbw_gbs, r.avg_busbw_ok) == (10.5, ok)
    assert ("average bus bandwidth below NCCL_TESTS_MIN_BW (FAILED)" in r.hard_failures()) is (ok is False)


def test_a_conclusion_names_the_collective_only_when_no_start_line_did():
    r = parse_nccl_text(HEADER + ROWS + "# Out of bounds values : 0 OK\n# Collective test concluded: alltoall_perf\n")
    assert (r.collective, r.concluded) == ("alltoall_perf", True)
    started = parse_nccl_text("# Collective test starting: sendrecv_perf\n" + HEADER + ROWS +
                              "# Collective test concluded: alltoall_perf\n")
    assert started.collective == "sendrecv_perf"
    assert not parse_nccl_text(HEADER + ROWS).concluded


def test_error_lines_are_kept_as_warnings_cut_at_500_characters_and_200_lines():
    r = parse_nccl_text(HEADER + ROWS + "# error: " + "x" * 600 + "\n")
    assert r.warnings == ("error: " + "x" * 500,)
    many = parse_nccl_text(HEADER + ROWS + "".join(f"# error: e{i}\n" for i in range(230)))
    assert len(many.warnings) == 200 and many.warnings[0] == "error: e0" and many.warnings[-1] == "error: e199"


def test_a_table_without_a_root_column_reads_by_its_header():
    header = ("#       size         count      type   redop     time   algbw   busbw #wrong     time   algbw   busbw "
              "#wrong\n")
    row = "        1024           256     float     sum    10.00    0.10    0.19      0    10.00    0.10    0.19      0\n"
    (parsed,) = parse_nccl_text(header + row + "# Out of bounds values : 0 OK\n").rows
    assert (parsed.redop, parsed.root, parsed.out_of_place.busbw_gbs) == ("sum", None, 0.19)


def test_the_error_column_generation_keeps_the_maximum_error_not_a_wrong_count():
    header = ("#       size         count      type   redop     time   algbw   busbw  error     time   algbw   busbw  "
              "error\n")
    row = "    33554432       8388608     float     sum    19902    1.69    2.53  2e-07    19898    1.69    2.53  4e-07\n"
    r = parse_nccl_text(header + row + "# Out of bounds values : 0 OK\n")
    assert r.column_format == "error"
    assert (r.rows[0].out_of_place.max_error, r.rows[0].out_of_place.wrong) == (2e-07, None)
    assert r.rows[0].in_place.max_error == 4e-07


def test_a_negative_wrong_count_is_no_count():
    bad = ROWS.replace("838.86      0", "838.86     -1")
    with pytest.raises(ParseError, match=r"line \d+: #wrong: '-1' is not a count"):
        parse_nccl_text(HEADER + bad)


def test_a_huge_wrong_count_printed_in_exponent_form_is_read_as_a_count():
    big = ROWS.replace("838.86      0", "838.86  1e+06")
    assert parse_nccl_text(HEADER + big).rows[1].out_of_place.wrong == 1_000_000


def test_a_negative_size_is_refused():
    with pytest.raises(ParseError, match="negative size or count"):
        parse_nccl_text(HEADER + ROWS.replace("        1024           256", "       -1024           256"))


def test_a_row_with_figures_missing_says_how_many_it_expected():
    cut = "        1024           256     float     sum      -1    10.00    0.10    0.19      0    10.00\n"
    with pytest.raises(ParseError, match="expected 8 figures after the 5 leading columns, found 5"):
        parse_nccl_text(HEADER + cut)


def test_a_row_that_stopped_after_out_of_place_is_where_the_test_hung():
    hung = "        1024           256     float     sum      -1    10.00    0.10    0.19      0\n"
    r = parse_nccl_text(HEADER + hung)
    assert r.incomplete_row == IncompleteRow(1024, 256, "float") and r.rows == ()
    assert r.hard_failures() == ("stopped during the 1024 B step",
                                 "output ended before the summary footer (test did not finish)")


def test_a_cut_row_followed_by_another_size_is_lost_with_a_warning():
    cut = "        1024           256     float     sum      -1    10.00    0.10    0.19      0\n"
    r = parse_nccl_text(HEADER + cut + ROWS.splitlines(keepends=True)[1] + "# Out of bounds values : 0 OK\n")
    assert r.incomplete_row is None and r.warnings == ("the 1024 B row was cut short and lost",)
    assert [row.size_bytes for row in r.rows] == [1073741824]


def test_launcher_chatter_and_library_banners_between_rows_are_ignored():
    text = HEADER + "srun: job 12 queued\n" + ROWS + "some banner line\n# Out of bounds values : 0 OK\n"
    assert len(parse_nccl_text(text).rows) == 2


@pytest.mark.parametrize("text", ["srun: error: nothing here\n", "#\n# just comments\n", "   \n"])
def test_output_without_anything_nccl_tests_prints_is_a_parse_error(text):
    with pytest.raises(ParseError, match="nccl-tests: no nccl-tests output found"):
        parse_nccl_text(text)


def test_a_json_document_is_recognised_after_leading_blank_lines():
    r = parse_nccl_tests("\n\n  " + read("nccl_sendrecv_pair.json"))
    assert (r.source_format, r.collective, len(r.rows)) == ("json", "sendrecv_perf", 5)
    with pytest.raises(ParseError) as caught:
        parse_nccl_tests("\n  {not json at all")
    assert str(caught.value).startswith("nccl-tests JSON: not valid JSON (")


# --- the model: what fails a run, and the bandwidth at a size ----------------------------------


def m(busbw: float, wrong: int | None = 0) -> Measurement:
    return Measurement(1.0, busbw, busbw, wrong)


def test_the_reasons_a_run_fails_are_listed_in_report_order_with_hosts_and_sizes():
    r = NcclResult("text", rows=(NcclRow(1024, 256, "half", "sum", -1, m(1.0, 2), m(1.0, 3)),),
                   fatal_errors=(FatalError("nccl", "unhandled system error", "node-b"), FatalError("cuda", "OOM")),
                   out_of_bounds=4, out_of_bounds_ok=True, avg_busbw_ok=False,
                   incomplete_row=IncompleteRow(2048, 512, "half"))
    assert r.hard_failures() == (
        "nccl failure on node-b: unhandled system error", "cuda failure: OOM", "5 wrong elements at 1024 B (half)",
        "out of bounds values: 4 FAILED", "average bus bandwidth below NCCL_TESTS_MIN_BW (FAILED)",
        "stopped during the 2048 B step")


def test_a_finished_run_without_rows_fails_for_that_alone():
    assert NcclResult("text", out_of_bounds=0).hard_failures() == ("no result rows",)


def test_a_single_out_of_bounds_value_fails_the_run():
    r = NcclResult("text", rows=(NcclRow(1024, 256, "float", "sum", -1, m(1.0), m(1.0)),), out_of_bounds=1,
                   out_of_bounds_ok=None)
    assert r.hard_failures() == ("out of bounds values: 1 FAILED",)


def test_an_out_of_bounds_failure_flag_fails_the_run_even_with_a_zero_count():
    r = NcclResult("text", rows=(NcclRow(1024, 256, "float", "sum", -1, m(1.0), m(1.0)),), out_of_bounds=0,
                   out_of_bounds_ok=False)
    assert r.hard_failures() == ("out of bounds values: 0 FAILED",)


def test_wrong_elements_are_counted_over_both_placements_and_every_row():
    rows = (NcclRow(1, 1, "f", None, None, m(1.0, 2), None), NcclRow(2, 1, "f", None, None, m(1.0, None), m(1.0, 5)))
    assert rows[0].wrong_total == 2 and rows[1].wrong_total == 5
    assert NcclResult("text", rows=rows).wrong_total == 7


def rows_at(*sizes_and_bw, placement_none: bool = False) -> NcclResult:
    return NcclResult("text", rows=tuple(NcclRow(size, size // 4, dtype, "sum", -1, m(bw), None if placement_none
                                                 else m(bw + 1)) for size, dtype, bw in sizes_and_bw))


def test_the_bandwidth_at_a_size_can_be_read_in_place():
    r = rows_at((1 << 30, "float", 400.0))
    assert busbw_at(r, 1 << 30, "in_place") == 401.0
    assert busbw_at(rows_at((1 << 30, "float", 400.0), placement_none=True), 1 << 30, "in_place") is None


def test_the_nearest_size_above_is_used_when_the_size_itself_was_not_measured():
    r = rows_at((1 << 29, "float", 100.0), (1 << 31, "float", 300.0), (1 << 32, "float", 200.0))
    assert busbw_at(r, 1 << 30) == 300.0


def test_a_nan_among_the_rows_at_the_size_makes_the_figure_nan():
    r = rows_at((1 << 30, "float", math.nan), (1 << 30, "half", 400.0))
    assert math.isnan(busbw_at(r, 1 << 30))
    assert busbw_at(r, 1 << 30, dtype="half") == 400.0


def test_libfabric_must_be_every_network_used_and_sockets_disprove_efa():
    assert NetEvidence(networks=("AWS Libfabric", "libfabric")).libfabric_network
    assert not NetEvidence(networks=("AWS Libfabric", "Socket")).libfabric_network
    assert not NetEvidence().libfabric_network
    proven = NetEvidence(providers=("efa",), networks=("AWS Libfabric",))
    assert proven.efa
    assert NetEvidence(providers=("efa",), libfabric_channels=True).efa
    assert not NetEvidence(providers=("efa",), networks=("AWS Libfabric",), socket=True).efa
    assert not NetEvidence(providers=("efa",)).efa


def test_the_json_view_adds_the_derived_facts():
    data = to_json(parse_nccl_text(WHOLE))
    assert data["complete"] is True and data["hosts"] == ["node-a", "node-b"] and data["hard_failures"] == []
    assert data["evidence"]["efa"] is False and data["config"]["n_gpus"] == 8


# --- more boundaries ---------------------------------------------------------------------------

ROW = "        1024           256     float     sum      -1    10.00    0.10    0.19      0    10.00    0.10    0.19      0"


def _bad_row(column: int, token: str) -> str:
    tokens = ROW.split()
    tokens[column] = token
    return "  ".join(tokens)


@pytest.mark.parametrize("column, name", [(5, "time"), (6, "algbw"), (7, "busbw"), (9, "time"), (10, "algbw"),
                                          (11, "busbw")])
def test_a_figure_that_is_no_number_is_refused_naming_its_line_and_column(column, name):
    with pytest.raises(ParseError) as caught:
        parse_nccl_text(HEADER + _bad_row(column, "fast") + "\n")
    assert str(caught.value) == f"line 3: {name}: 'fast' is not a number"


def test_a_root_that_is_no_integer_is_refused_naming_it():
    with pytest.raises(ParseError) as caught:
        parse_nccl_text(HEADER + _bad_row(4, "1.5") + "\n")
    assert str(caught.value) == "line 3: root: '1.5' is not an integer"


def test_a_wrong_count_that_is_no_number_is_named_as_the_wrong_column_of_its_generation():
    with pytest.raises(ParseError) as caught:
        parse_nccl_text(HEADER + _bad_row(8, "x") + "\n")
    assert str(caught.value) == "line 3: #wrong: 'x' is not a number"
    old_header = "#  size  count  type  redop  time  algbw  busbw  error  time  algbw  busbw  error\n"
    with pytest.raises(ParseError) as old:
        parse_nccl_text(old_header + "1024  256  float  sum  10.0  0.1  0.19  x  10.0  0.1  0.19  0\n")
    assert str(old.value) == "line 2: error: 'x' is not a number"


@pytest.mark.parametrize("column", [5, 6, 7])
def test_a_figure_the_tool_printed_as_nan_is_kept_as_nan(column):
    row = parse_nccl_text(HEADER + _bad_row(column, "nan") + "\n").rows[0]
    figures = (row.out_of_place.time_us, row.out_of_place.algbw_gbs, row.out_of_place.busbw_gbs)
    assert math.isnan(figures[column - 5])


def test_an_error_column_printed_as_nan_is_kept_as_nan():
    old_header = "#  size  count  type  redop  time  algbw  busbw  error  time  algbw  busbw  error\n"
    row = parse_nccl_text(old_header + "1024  256  float  sum  10.0  0.1  0.19  nan  10.0  0.1  0.19  0\n").rows[0]
    assert math.isnan(row.out_of_place.max_error)


def test_a_data_type_or_operation_that_is_no_name_is_refused_naming_it():
    with pytest.raises(ParseError) as caught:
        parse_nccl_text(HEADER + _bad_row(2, "fl@at") + "\n")
    assert str(caught.value) == "line 3: type: 'fl@at' is not a data type name"
    with pytest.raises(ParseError) as op:
        parse_nccl_text(HEADER + _bad_row(3, "+") + "\n")
    assert str(op.value) == "line 3: redop: '+' is not an operation name"


@pytest.mark.parametrize("line, incomplete", [("        1024           256", IncompleteRow(1024, 256, None)),
                                              ("        1024           256     float", IncompleteRow(1024, 256, "float")),
                                              ("        1024           256     float     sum      -1",
                                               IncompleteRow(1024, 256, "float"))])
def test_a_row_cut_before_its_figures_records_the_size_where_the_test_stopped(line, incomplete):
    assert parse_nccl_text(HEADER + line + "\n").incomplete_row == incomplete


def test_a_row_split_by_a_log_line_is_joined_even_when_its_rest_carries_the_timestamp():
    header = HEADER.replace("#wrong\n", "#wrong  date  time\n", 1)
    start = "        1024           256     float     sum      -1    10.00    0.10    0.19      0"
    text = (header + start + "\n" + "node-a:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n"
            + "    10.00    0.10    0.19      0  2026-12-01  10:00:00\n# Out of bounds values : 0 OK\n")
    r = parse_nccl_text(text)
    assert r.incomplete_row is None and r.rows[0].in_place.busbw_gbs == 0.19


def test_a_row_ending_in_a_date_without_a_time_is_malformed():
    with pytest.raises(ParseError, match="expected 8 figures after the 5 leading columns, found 10"):
        parse_nccl_text(HEADER + ROW + "  2026-12-01  later\n")


def test_launcher_lines_whose_second_word_is_a_number_are_not_rows():
    text = HEADER + "srun 12 tasks started\n" + ROWS + "# Out of bounds values : 0 OK\n"
    assert len(parse_nccl_text(text).rows) == 2


def test_a_stray_line_of_figures_after_a_whole_row_is_ignored():
    text = HEADER + ROWS + "   1.5  2.5\n# Out of bounds values : 0 OK\n"
    assert len(parse_nccl_text(text).rows) == 2


def test_unreadable_footer_figures_are_refused_naming_their_line():
    with pytest.raises(ParseError) as oob:
        parse_nccl_text(HEADER + ROWS + "# Out of bounds values : some OK\n")
    assert str(oob.value) == "line 5: out of bounds values: 'some' is not an integer"
    with pytest.raises(ParseError) as avg:
        parse_nccl_text(HEADER + ROWS + "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : fast\n")
    assert str(avg.value) == "line 6: avg bus bandwidth: 'fast' is not a number"
    nan = parse_nccl_text(HEADER + ROWS + "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : nan\n")
    assert math.isnan(nan.avg_busbw_gbs)


def test_a_run_that_printed_only_its_preamble_parses_as_unfinished():
    r = parse_nccl_text(PREAMBLE)
    assert r.rows == () and r.source_format == "text"
    assert r.hard_failures() == ("output ended before the summary footer (test did not finish)",)


def test_what_is_not_text_is_refused_naming_the_tool():
    for parse in (parse_nccl_text, parse_nccl_tests):
        with pytest.raises(ParseError) as caught:
            parse(b"bytes")  # type: ignore[arg-type]
        assert str(caught.value) == "nccl-tests: expected text, got bytes"
    with pytest.raises(ParseError) as empty:
        parse_nccl_text("nothing here\n")
    assert str(empty.value) == "nccl-tests: no nccl-tests output found (no preamble, table or footer)"


# Tables whose header was not captured: the layout is read off the first row.

WRONG_GEN = "1024  256  float  sum  -1  10.0  0.1  0.19  0  11.0  0.1  0.18  2"
ERROR_GEN = "1024  256  float  sum  10.0  0.1  0.19  2e-07  11.0  0.1  0.18  3e-07"
NO_REDOP = "1024  256  float  10.0  0.1  0.19  2e-07  11.0  0.1  0.18  3e-07"
PER_ITER = ("1024  256  float  sum  -1  10.0  0.1  0.19  0  9.0  12.0  11.5  1.5  "
            "11.0  0.1  0.18  0  10.0  13.0  12.5  2.5")
PER_ITER_NO_ROOT = ("1024  256  float  sum  10.0  0.1  0.19  0  9.0  12.0  11.5  1.5  "
                    "11.0  0.1  0.18  0  10.0  13.0  12.5  2.5")


def test_a_headerless_row_of_the_wrong_generation_reads_redop_root_and_wrong_counts():
    r = parse_nccl_text(WRONG_GEN + "\n")
    assert r.column_format == "wrong"
    (row,) = r.rows
    assert (row.redop, row.root, row.out_of_place.wrong, row.in_place.wrong, row.in_place.busbw_gbs) == (
        "sum", -1, 0, 2, 0.18)


def test_a_headerless_row_of_the_error_generation_reads_the_maximum_error():
    r = parse_nccl_text(ERROR_GEN + "\n")
    assert r.column_format == "error"
    (row,) = r.rows
    assert (row.redop, row.root, row.out_of_place.max_error, row.in_place.max_error, row.in_place.wrong) == (
        "sum", None, 2e-07, 3e-07, None)


def test_a_headerless_row_without_a_reduction_reads_its_figures_from_the_type_on():
    (row,) = parse_nccl_text(NO_REDOP + "\n").rows
    assert (row.redop, row.root, row.out_of_place.time_us, row.in_place.busbw_gbs) == (None, None, 10.0, 0.18)


def test_a_headerless_row_whose_first_figure_is_nan_has_no_reduction_column():
    (row,) = parse_nccl_text(NO_REDOP.replace("10.0", "nan", 1) + "\n").rows
    assert row.redop is None and math.isnan(row.out_of_place.time_us)


@pytest.mark.parametrize("line, root", [(PER_ITER, -1), (PER_ITER_NO_ROOT, None)])
def test_a_headerless_row_with_per_iteration_columns_reads_them(line, root):
    (row,) = parse_nccl_text(line + "\n").rows
    assert row.root == root
    m = row.in_place
    assert (m.time_us, m.busbw_gbs, m.iter_min_us, m.iter_max_us, m.iter_p99_us, m.iter_cv_pct) == (
        11.0, 0.18, 10.0, 13.0, 12.5, 2.5)


def test_a_bad_per_iteration_figure_is_refused_naming_its_column_and_line():
    with pytest.raises(ParseError) as caught:
        parse_nccl_text("# comment\n" + PER_ITER.replace("11.5", "x") + "\n")
    assert str(caught.value) == "line 2: iter_p99_us: 'x' is not a number"
    (row,) = parse_nccl_text(PER_ITER.replace("11.5", "nan") + "\n").rows
    assert math.isnan(row.out_of_place.iter_p99_us)


def test_a_minimal_header_naming_busbw_last_sets_the_wrong_generations_layout():
    r = parse_nccl_text("#  size  count  type  busbw\n1024  256  float  10.0  0.1  0.19  0  11.0  0.1  0.18  5\n")
    assert r.column_format == "wrong" and r.rows[0].in_place.wrong == 5


def test_comment_lines_that_merely_mention_size_count_or_busbw_leave_the_layout_alone():
    for comment in ("#  size  count  type", "#  size  of  busbw  x", "#  count  size  busbw  x"):
        r = parse_nccl_text(comment + "\n" + ERROR_GEN + "\n")
        assert r.column_format == "error" and r.rows[0].out_of_place.max_error == 2e-07, comment
