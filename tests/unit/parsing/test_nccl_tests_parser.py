"""nccl-tests output, text and -J JSON, read into typed records."""

import json
import math

import pytest

from tasks.errors import ParseError
from tasks.parsing.nccl_json import parse_nccl_json, with_log
from tasks.parsing.nccl_log import scan_log
from tasks.parsing.nccl_tests import busbw_at, parse_nccl_tests, to_json
from tests.unit.parsing.samples import read

GIB = 1 << 30


def test_the_2x_p5_sample_reads_436_95_gbs_at_1_gib_out_of_place_and_440_96_in_place():
    result = parse_nccl_tests(read("nccl_allreduce_2x_p5_slurm.txt"))
    assert busbw_at(result, GIB) == 436.95
    assert busbw_at(result, GIB, "in_place") == 440.96
    assert busbw_at(result, 16 * GIB) == 487.09
    assert busbw_at(result, 128 << 20) == 289.16


def test_the_sweep_average_is_kept_but_busbw_at_never_returns_it():
    result = parse_nccl_tests(read("nccl_allreduce_2x_p5_slurm.txt"))
    assert result.avg_busbw_gbs == 52.9753
    assert result.avg_busbw_ok is None  # no NCCL_TESTS_MIN_BW, no OK/FAILED suffix
    assert all(busbw_at(result, r.size_bytes) != 52.9753 for r in result.rows)


def test_every_row_of_the_sweep_is_read_with_its_columns():
    result = parse_nccl_tests(read("nccl_allreduce_2x_p5_slurm.txt"))
    assert len(result.rows) == 32
    row = result.rows[-5]
    assert (row.size_bytes, row.count, row.dtype, row.redop, row.root) == (1073741824, 268435456, "float", "sum", -1)
    assert (row.out_of_place.time_us, row.out_of_place.algbw_gbs, row.out_of_place.wrong) == (4607.6, 233.04, 0)
    assert result.column_format == "wrong"
    assert result.out_of_bounds == 0 and result.out_of_bounds_ok is True
    assert result.hard_failures() == ()


def test_busbw_at_takes_the_nearest_row_at_or_above_the_size():
    result = parse_nccl_tests(read("nccl_allreduce_2x_p5_slurm.txt"))
    assert busbw_at(result, GIB + 1) == 443.72  # the 2 GiB row, not the 1 GiB one below it
    assert busbw_at(result, 1) == 0.00  # 8 B row


def test_busbw_at_is_none_when_the_sweep_never_reached_the_size():
    result = parse_nccl_tests(read("nccl_allreduce_2x_p5_eks.txt"))
    assert busbw_at(result, 2 * GIB) == 437.79
    assert busbw_at(result, 16 * GIB) is None


def test_busbw_at_can_be_limited_to_one_data_type():
    result = parse_nccl_tests(read("nccl_allreduce_bfloat16_1node_h200.txt"))
    assert busbw_at(result, GIB, dtype="bfloat16") == 464.69
    assert busbw_at(result, GIB, dtype="float") is None


def test_lines_tagged_by_mpirun_are_read_like_lines_tagged_by_srun():
    result = parse_nccl_tests(read("nccl_allreduce_2x_p5_eks.txt"))
    assert [r.size_bytes for r in result.rows][:2] == [0, 67108864]
    assert busbw_at(result, GIB) == 313.29
    assert result.avg_busbw_gbs == 52.9753


def test_the_pre_2_13_error_column_generation_is_read_without_a_root_column():
    result = parse_nccl_tests(read("nccl_allreduce_old_error_column.txt"))
    assert result.column_format == "error"
    row = result.rows[0]
    assert (row.redop, row.root) == ("sum", None)
    assert row.out_of_place.max_error == 2e-07 and row.out_of_place.wrong is None
    assert busbw_at(result, GIB) == 2.55
    assert [r.rank for r in result.ranks] == [0, 1, 2, 3]
    assert result.ranks[0].group is None and result.ranks[0].device_name == "Tesla K80"
    assert result.config.n_gpus == 1 and result.config.iters == 20 and result.config.warmup_iters == 5


def test_old_tables_without_a_redop_column_are_read():
    result = parse_nccl_tests(read("nccl_allgather_old_no_redop.txt"))
    assert len(result.rows) == 8
    assert result.rows[-1].redop is None and result.rows[-1].size_bytes == 1008
    assert result.hosts == ("seville",)
    assert result.ranks[-1].device == 11 and result.ranks[-1].bus_id == "0xe7"


def test_bfloat16_rows_are_kept_with_their_type():
    result = parse_nccl_tests(read("nccl_allreduce_bfloat16_1node_h200.txt"))
    assert {r.dtype for r in result.rows} == {"bfloat16"}
    assert len(result.rows) == 12
    assert result.collective == "all_reduce_perf" and result.concluded
    assert result.nccl_tests_version == "2.17.1"
    assert result.config.n_gpus == 8 and result.config.max_bytes == 16 * GIB


def test_rank_lines_map_each_rank_to_its_host_and_gpu():
    result = parse_nccl_tests(read("nccl_alltoall_pair_p5en_efa.txt"))
    assert len(result.ranks) == 16
    assert result.hosts == ("ip-10-1-7-21", "ip-10-1-7-22")
    rank9 = result.ranks[9]
    assert (rank9.rank, rank9.host, rank9.device, rank9.bus_id, rank9.device_name) == (
        9, "ip-10-1-7-22", 1, "0000:64:00", "NVIDIA H200")


def test_na_in_the_wrong_column_means_unchecked_not_zero():
    result = parse_nccl_tests(read("nccl_alltoall_pair_p5en_efa.txt"))
    assert all(r.in_place.wrong is None for r in result.rows)
    assert all(r.out_of_place.wrong == 0 for r in result.rows)


def test_efa_evidence_is_read_from_the_nccl_info_lines():
    evidence = parse_nccl_tests(read("nccl_alltoall_pair_p5en_efa.txt")).evidence
    assert evidence.providers == ("efa",) and evidence.fabrics == ("efa-direct",)
    assert evidence.networks == ("Libfabric",)
    assert evidence.gdrdma and not evidence.socket and evidence.efa


def test_a_log_without_the_info_lines_proves_nothing_about_efa():
    assert not parse_nccl_tests(read("nccl_allreduce_2x_p5_slurm.txt")).evidence.efa


def test_a_socket_fallback_is_evidence_against_efa():
    text = read("nccl_alltoall_pair_p5en_efa.txt").replace(
        "via NET/Libfabric/0/GDRDMA", "via NET/Socket/0").replace("Using network Libfabric", "Using network Socket")
    evidence = parse_nccl_tests(text).evidence
    assert evidence.socket and evidence.efa_provider and not evidence.efa


def test_the_dlc_ci_evidence_lines_are_recognised_in_a_bare_log():
    evidence, fatal, _ = scan_log(read("nccl_efa_evidence_eks.txt"))
    assert evidence.providers == ("efa",) and evidence.networks == ("AWS Libfabric",)
    assert evidence.efa and fatal == ()


def test_wrong_elements_and_an_out_of_bounds_failure_are_hard_failures():
    result = parse_nccl_tests(read("nccl_allreduce_pair_wrong.txt"))
    assert result.wrong_total == 248
    assert result.out_of_bounds == 1 and result.out_of_bounds_ok is False
    failures = result.hard_failures()
    assert any("248 wrong elements at 536870912 B" in f for f in failures)
    assert any("out of bounds values: 1 FAILED" in f for f in failures)


def test_a_timeout_inside_a_row_names_the_host_and_the_size_it_hung_at():
    result = parse_nccl_tests(read("nccl_allreduce_pair_timeout.txt"))
    assert result.incomplete_row.size_bytes == 134217728
    timeouts = [e for e in result.fatal_errors if e.kind == "timeout"]
    # The row's root column ('-1') is glued to the host name; the rank lines repair it.
    assert [e.host for e in timeouts] == ["ip-10-1-7-21", "ip-10-1-7-22"]
    assert timeouts[0].source == "common.cu:312" and "30 s" in timeouts[0].message
    assert not result.complete and len(result.rows) == 2
    assert any("stopped during the 134217728 B step" in f for f in result.hard_failures())


def test_the_aws_ofi_nccl_failure_lines_are_fatal_errors_with_their_host():
    result = parse_nccl_tests(read("nccl_aws_ofi_nccl_476_failure.txt"))
    kinds = [(e.kind, e.host, e.source) for e in result.fatal_errors]
    assert kinds == [("nccl", "test-nccl-p5-2-worker-0", "common.cu:961"),
                     ("test", "test-nccl-p5-2-worker-0", "common.cu:844")]
    assert result.fatal_errors[0].message.startswith("internal error - please report")
    assert "Attribute arch of node cpu not found" in result.warnings
    assert result.hard_failures()


def test_cuda_failures_are_fatal_too():
    result = parse_nccl_tests("# nThread 1 nGpus 8 minBytes 8 maxBytes 8\n"
                              "node-a: Test CUDA failure common.cu:732 'out of memory'\n")
    assert [(e.kind, e.host, e.message) for e in result.fatal_errors] == [("cuda", "node-a", "out of memory")]


def test_output_cut_off_mid_sweep_is_an_unfinished_run():
    text = read("nccl_allreduce_2x_p5_slurm.txt")
    cut = text[: text.index("0:   2147483648")]
    result = parse_nccl_tests(cut)
    assert busbw_at(result, GIB) == 436.95
    assert not result.complete
    assert any("did not finish" in f for f in result.hard_failures())


def test_a_row_printed_only_up_to_its_root_records_where_the_test_stopped():
    text = read("nccl_allreduce_2x_p5_slurm.txt")
    cut = text[: text.index("0:   2147483648")] + "0:   2147483648     536870912     float     sum      -1"
    assert parse_nccl_tests(cut).incomplete_row.size_bytes == 2147483648


def test_a_failed_average_check_is_a_hard_failure():
    text = read("nccl_allreduce_2x_p5_slurm.txt").replace("52.9753", "52.9753 FAILED")
    result = parse_nccl_tests(text)
    assert result.avg_busbw_ok is False
    assert any("NCCL_TESTS_MIN_BW" in f for f in result.hard_failures())


def test_per_iteration_and_timestamp_columns_are_read():
    header = ("#       size         count      type   redop    root     time   algbw   busbw  #wrong"
              "    i_min    i_max    i_p99    i_cv%     time   algbw   busbw  #wrong    i_min    i_max"
              "    i_p99    i_cv%           timestamp")
    row = ("  1073741824     268435456     float     sum      -1   4607.6  233.04  436.95       0"
           "   4590.1   4700.2   4690.0     0.81   4565.6  235.18  440.96       0   4550.0   4610.3"
           "   4605.5     0.42 2025-06-02 10:14:07")
    result = parse_nccl_tests(f"{header}\n{row}\n# Out of bounds values : 0 OK\n")
    oop = result.rows[0].out_of_place
    assert (oop.busbw_gbs, oop.iter_p99_us, oop.iter_cv_pct) == (436.95, 4690.0, 0.81)
    assert result.rows[0].in_place.iter_min_us == 4550.0


def test_counts_printed_in_exponent_form_are_read_as_counts():
    text = read("nccl_allreduce_2x_p5_slurm.txt").replace(
        "  436.95      0", "  436.95  1e+06")
    assert parse_nccl_tests(text).wrong_total == 1_000_000


def test_the_json_document_parses_to_the_same_kind_of_records():
    result = parse_nccl_tests(read("nccl_sendrecv_pair.json"))
    assert result.source_format == "json" and result.collective == "sendrecv_perf"
    assert busbw_at(result, GIB) == 45.158851
    assert result.hosts == ("ip-10-1-7-21", "ip-10-1-7-22") and len(result.ranks) == 16
    assert result.out_of_bounds_ok is True and result.avg_busbw_ok is None  # "unchecked"
    assert result.rows[0].root == -1 and result.rows[0].out_of_place.wrong == 0
    assert result.nccl_version == "2.27.7" and result.config.n_gpus == 1
    assert result.hard_failures() == ()


def test_json_strings_for_nan_and_booleans_are_understood():
    doc = json.loads(read("nccl_sendrecv_pair.json"))
    doc["results"][2]["out_of_place"]["bus_bw"] = "nan"
    doc["out_of_bounds"] = {"count": 3, "okay": "false"}
    result = parse_nccl_json(json.dumps(doc))
    assert math.isnan(busbw_at(result, GIB))
    assert result.out_of_bounds_ok is False and result.hard_failures()


@pytest.mark.parametrize("key", ["rank", "hostname", "device"])
def test_a_json_device_without_its_rank_host_or_gpu_is_a_parse_error_naming_the_entry_and_key(key):
    doc = json.loads(read("nccl_sendrecv_pair.json"))
    del doc["config"]["devices"][3][key]
    with pytest.raises(ParseError, match=rf"^nccl-tests JSON: config.devices\[3\] lacks '{key}'$"):
        parse_nccl_json(json.dumps(doc))


def test_json_plus_the_runs_stdout_gains_the_efa_evidence():
    result = with_log(parse_nccl_json(read("nccl_sendrecv_pair.json")), read("nccl_alltoall_pair_p5en_efa.txt"))
    assert result.evidence.efa
    assert busbw_at(result, GIB) == 45.158851


def test_to_json_gives_plain_json_with_the_derived_facts():
    data = to_json(parse_nccl_tests(read("nccl_allreduce_pair_timeout.txt")))
    assert json.loads(json.dumps(data)) == data
    assert data["complete"] is False and data["hosts"] == ["ip-10-1-7-21", "ip-10-1-7-22"]
    assert data["evidence"]["efa"] is True and data["hard_failures"]
    assert data["rows"][0]["out_of_place"]["busbw_gbs"] == 78.61


@pytest.mark.parametrize("text", [
    "", "hello world\n", "NCCL version 2.19.3+cuda12.2\n", "{}", "[1, 2]", "{not json",
    '{"results": [{"size": "x"}]}', '{"results": [{"size": 8, "count": 2, "type": "float", '
    '"out_of_place": {"time": true, "alg_bw": 1, "bus_bw": 1}}]}',
])
def test_text_that_is_not_nccl_tests_output_is_a_parse_error(text):
    with pytest.raises(ParseError):
        parse_nccl_tests(text)


def test_a_malformed_row_is_a_parse_error_naming_its_line():
    text = read("nccl_allreduce_2x_p5_slurm.txt").replace("4607.6  233.04  436.95", "4607.6  233.04")
    with pytest.raises(ParseError, match=r"line 30"):
        parse_nccl_tests(text)


def test_a_row_split_by_nccl_log_lines_is_joined_back_together():
    text = read("nccl_alltoall_pair_p5en_efa.txt")
    row = next(ln for ln in text.splitlines() if "  1073741824" in ln)
    cut = row.index("   -1") + len("   -1")
    split = "\n".join([
        row[:cut] + "ip-10-1-7-21:41234:41300 [0] NCCL INFO Channel 04/1 : 0[0] -> 8[0] [send] via NET/Libfabric/0/GDRDMA",
        "[1,0]<stdout>:ip-10-1-7-21:41234:41300 [0] NCCL INFO Connected all rings",
        "[1,0]<stdout>:" + row[cut:],
    ])
    result = parse_nccl_tests(text.replace(row, split))
    assert busbw_at(result, GIB) == 77.66
    assert len(result.rows) == 7 and result.incomplete_row is None and result.hard_failures() == ()


def test_a_row_lost_mid_sweep_is_a_warning_not_the_point_where_the_test_stopped():
    text = read("nccl_allreduce_2x_p5_slurm.txt").replace(
        "0:   1073741824     268435456     float     sum      -1   4607.6  233.04  436.95      0"
        "   4565.6  235.18  440.96      0", "0:   1073741824     268435456     float     sum      -1")
    result = parse_nccl_tests(text)
    assert result.incomplete_row is None and busbw_at(result, GIB) == 443.72
    assert "the 1073741824 B row was cut short and lost" in result.warnings


# --- recorded on an H200 (nccl-tests 2.19.6, NCCL 2.28.9, one GPU: busbw is 0 by its factor) ---

def test_a_recorded_single_h200_all_reduce_reads_13_rows_with_zero_bus_bandwidth():
    result = parse_nccl_tests(read("nccl_allreduce_1x_h200_recorded.txt"))
    assert result.collective == "all_reduce_perf" and len(result.rows) == 13
    assert {r.dtype for r in result.rows} == {"bfloat16"}
    assert result.rows[-1].size_bytes == 128 << 20 and result.rows[-1].out_of_place.algbw_gbs == 2019.2
    assert busbw_at(result, 128 << 20) == 0.0  # (n-1)/n with n = 1 rank
    assert result.out_of_bounds == 0 and result.avg_busbw_gbs == 0.0


def test_a_recorded_version_3_document_reads_and_its_environment_is_left_out_before_it_is_kept():
    from tasks.parsing.nccl_json import without_env

    text = read("nccl_sendrecv_1x_h200_recorded.json")
    assert json.loads(text)["version"] == 3 and "pdlift-canary-9f2c-never-stored" in text
    kept = without_env(text)
    assert "pdlift-canary-9f2c-never-stored" not in kept and "AWS_SECRET_ACCESS_KEY" not in kept
    assert json.loads(kept)["env"] == "left out: 3 variable(s) of the test's environment"
    assert parse_nccl_json(kept) == parse_nccl_json(text)  # nothing the judge reads is lost
    result = parse_nccl_json(kept)
    assert result.collective == "sendrecv_perf" and result.nccl_version == "2.28.9" and len(result.rows) == 8
    # cut short by a timeout: what follows "env" cannot be told from a secret's tail
    cut = text[:text.index("pdlift-canary") + 10]
    assert "pdlift-canary" not in without_env(cut) and "cut short" in without_env(cut)
    older = read("nccl_sendrecv_pair.json")  # version 2 wrote its env too
    assert "FI_PROVIDER=efa" in older and "FI_PROVIDER=efa" not in without_env(older)
    no_env = json.dumps({k: v for k, v in json.loads(older).items() if k != "env"})
    assert without_env(no_env) == no_env


def test_a_recorded_run_that_fell_back_to_sockets_shows_no_efa_evidence():
    result = parse_nccl_tests(read("nccl_alltoall_1x_h200_socket_recorded.txt"))
    assert result.evidence.networks == ("Socket",) and result.evidence.socket
    assert result.evidence.providers == () and not result.evidence.gdrdma


def test_a_pre_2_9_version_code_and_a_row_without_its_in_place_half_are_read():
    # NCCL_VERSION_CODE was major*1000 + minor*100 + patch before 2.9 (nccl.h); a row whose
    # in-place half is null (nccl-tests -J with out-of-place only) keeps its out-of-place figures.
    doc = json.loads(read("nccl_sendrecv_pair.json"))
    doc["nccl_version"] = 2708
    doc["results"][0]["in_place"] = None
    result = parse_nccl_json(json.dumps(doc))
    assert result.nccl_version == "2.7.8"
    assert result.rows[0].in_place is None
    assert result.rows[0].out_of_place.busbw_gbs == pytest.approx(42.810378)
