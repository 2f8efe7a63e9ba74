"""The fabric judge's rows as the fabric report prints them (``tasks.planning.fabric.judge``): each
hard failure with what was measured against what, the EFA evidence rows, the floor that applies per
collective and layer, and the outliers' direction and figures."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from blueprints.schema import FabricSpec
from tasks.parsing.fi_info import parse_fi_info
from tasks.parsing.nccl_model import Measurement, NcclResult, NcclRow, NetEvidence
from tasks.parsing.nvidia_smi import parse_nvidia_smi
from tasks.parsing.pingpong import PingpongResult, PingpongRow, PingpongTable, parse_pingpong
from tasks.planning.fabric import (
    NcclRun, PairRuns, PingpongRun, Verdict, judge_full_set, judge_inventory, judge_nics, judge_pairs,
    judge_single_nodes, negative_control,
)
from tasks.planning.fabric.judge import nccl_checks, pair_floors, pingpong_checks
from tasks.planning.fabric.records import Check
from tests.unit.parsing.samples import read

GIB = 1 << 30
SPEC = FabricSpec()
PASS, MONITOR, ISOLATE = Verdict.PASS, Verdict.MONITOR, Verdict.ISOLATE
EFA = NetEvidence(providers=("efa",), fabrics=("efa-direct",), networks=("AWS Libfabric",), libfabric_channels=True,
                  gdrdma=True)


def result(busbw: float | None = 400.0, evidence: NetEvidence = EFA, size: int = GIB, **more) -> NcclResult:
    rows = () if busbw is None else (NcclRow(size, size // 4, "float", "sum", -1, Measurement(1.0, busbw, busbw, 0),
                                             Measurement(1.0, busbw, busbw, 0)),)
    return NcclResult("text", collective="all_reduce_perf", rows=rows, evidence=evidence,
                      **{"out_of_bounds": 0, "out_of_bounds_ok": True, **more})


def run(busbw: float | None = 400.0, collective: str = "all_reduce_perf", evidence: NetEvidence = EFA,
        **kw) -> NcclRun:
    return NcclRun(collective, result(busbw, evidence), **{"exit_code": 0, **kw})


def by_name(checks) -> dict[str, Check]:
    return {c.name: c for c in checks}


# --- one nccl-tests run ------------------------------------------------------------------------


def test_a_hung_run_shows_the_timeout_it_was_killed_at():
    checks = by_name(nccl_checks(run(timed_out=True, exit_code=None), SPEC, floor_gbs=None, require_efa=False))
    assert checks["all_reduce finished"] == Check("all_reduce finished", ISOLATE, "timeout", 600, "s",
                                                  "all_reduce hung: killed at its 600 s timeout")
    assert "all_reduce exit code" not in checks  # an unknown exit code is no second failure


def test_a_non_zero_exit_shows_the_code_against_0_and_exit_0_shows_nothing():
    checks = by_name(nccl_checks(run(exit_code=3), SPEC, floor_gbs=None, require_efa=False))
    assert checks["all_reduce exit code"] == Check("all_reduce exit code", ISOLATE, 3, 0, "",
                                                   "all_reduce exited with code 3")
    assert "all_reduce exit code" not in by_name(nccl_checks(run(exit_code=0), SPEC, floor_gbs=None,
                                                             require_efa=False))


def test_a_run_without_readable_output_says_why_or_that_nothing_came_back():
    lost = NcclRun("alltoall_perf", None, 255, error="ssh: connection lost")
    (check,) = [c for c in nccl_checks(lost, SPEC, floor_gbs=60.0, require_efa=True) if c.name == "alltoall output"]
    assert check == Check("alltoall output", ISOLATE, None, None, "", "alltoall left no readable output: ssh: "
                                                                      "connection lost")
    silent = nccl_checks(NcclRun("alltoall_perf", None, None), SPEC, floor_gbs=60.0, require_efa=True)
    assert silent == [Check("alltoall output", ISOLATE, None, None, "",
                            "alltoall left no readable output: nothing came back")]


def test_each_hard_failure_of_the_output_is_its_own_row():
    broken = NcclRun("all_reduce_perf", result(400.0, out_of_bounds=2), 0)
    checks = [c for c in nccl_checks(broken, SPEC, floor_gbs=None, require_efa=False) if c.name == "all_reduce result"]
    assert checks == [Check("all_reduce result", ISOLATE, None, None, "",
                            "all_reduce: out of bounds values: 2 FAILED")]


def test_the_bandwidth_row_shows_the_figure_at_the_judging_size_against_the_floor():
    checks = by_name(nccl_checks(run(450.5), SPEC, floor_gbs=300.0, require_efa=False))
    assert checks["all_reduce busbw @ 1 GiB"] == Check("all_reduce busbw @ 1 GiB", PASS, 450.5, 300.0, "GB/s")
    low = by_name(nccl_checks(run(299.5), SPEC, floor_gbs=300.0, require_efa=False))["all_reduce busbw @ 1 GiB"]
    assert low == Check("all_reduce busbw @ 1 GiB", ISOLATE, 299.5, 300.0, "GB/s",
                        "all_reduce busbw 299.50 GB/s at 1 GiB is below the 300 GB/s floor")


def test_without_a_floor_the_bandwidth_is_shown_and_passes():
    checks = by_name(nccl_checks(run(12.0), SPEC, floor_gbs=None, require_efa=False))
    assert checks["all_reduce busbw @ 1 GiB"] == Check("all_reduce busbw @ 1 GiB", PASS, 12.0, None, "GB/s")


def test_a_nan_bandwidth_isolates_even_without_a_floor_to_fail():
    nan = by_name(nccl_checks(run(math.nan), SPEC, floor_gbs=300.0, require_efa=False))["all_reduce busbw @ 1 GiB"]
    assert nan.verdict is ISOLATE


def test_a_sweep_that_stopped_below_the_judging_size_isolates_and_says_so():
    short = NcclRun("all_reduce_perf", result(400.0, size=GIB // 2), 0)
    check = by_name(nccl_checks(short, SPEC, floor_gbs=300.0, require_efa=False))["all_reduce busbw @ 1 GiB"]
    assert check == Check("all_reduce busbw @ 1 GiB", ISOLATE, None, 300.0, "GB/s",
                          "all_reduce sweep never reached 1 GiB")


def test_a_run_with_no_rows_at_all_gets_no_bandwidth_row_beside_its_hard_failure():
    empty = NcclRun("all_reduce_perf", result(None), 0)
    names = [c.name for c in nccl_checks(empty, SPEC, floor_gbs=300.0, require_efa=False)]
    assert names == ["all_reduce result"]


def test_the_judging_size_comes_from_the_blueprint():
    spec = FabricSpec(judge_size_bytes=64 << 20)
    small = NcclRun("all_reduce_perf", result(200.0, size=64 << 20), 0)
    assert by_name(nccl_checks(small, spec, floor_gbs=100.0, require_efa=False))["all_reduce busbw @ 64 MiB"].verdict \
        is PASS


# --- EFA evidence ------------------------------------------------------------------------------


def test_proven_efa_shows_the_provider_row_and_nothing_to_monitor():
    checks = nccl_checks(run(), SPEC, floor_gbs=None, require_efa=True)
    assert by_name(checks)["all_reduce EFA provider"] == Check("all_reduce EFA provider", PASS, "efa", "efa")
    assert "all_reduce network" not in by_name(checks) and "all_reduce GPUDirect RDMA" not in by_name(checks)


def test_a_run_without_the_efa_provider_line_isolates_naming_what_was_seen():
    tcp = replace(EFA, providers=("tcp", "efa"))
    check = by_name(nccl_checks(run(evidence=tcp), SPEC, floor_gbs=None, require_efa=True))["all_reduce EFA provider"]
    assert check == Check("all_reduce EFA provider", ISOLATE, "tcp, efa", "efa", "",
                          "all_reduce: NCCL log lacks 'NET/OFI Selected provider is efa' (providers seen: tcp, efa)")
    none = by_name(nccl_checks(run(evidence=replace(EFA, providers=())), SPEC, floor_gbs=None, require_efa=True))
    assert none["all_reduce EFA provider"].measured == "none"


def test_a_fall_back_to_sockets_isolates_showing_socket_against_libfabric():
    sockets = replace(EFA, socket=True)
    check = by_name(nccl_checks(run(evidence=sockets), SPEC, floor_gbs=None, require_efa=True))["all_reduce network"]
    assert check == Check("all_reduce network", ISOLATE, "Socket", "Libfabric", "",
                          "all_reduce: NCCL fell back to TCP sockets (NET/Socket)")


def test_no_libfabric_network_line_nor_channel_isolates_naming_the_networks_seen():
    plain = replace(EFA, networks=("IB",), libfabric_channels=False)
    check = by_name(nccl_checks(run(evidence=plain), SPEC, floor_gbs=None, require_efa=True))["all_reduce network"]
    assert check == Check("all_reduce network", ISOLATE, "IB", "Libfabric", "",
                          "all_reduce: NCCL log lacks 'Using network Libfabric' (networks: IB)")
    bare = replace(EFA, networks=(), libfabric_channels=False)
    assert by_name(nccl_checks(run(evidence=bare), SPEC, floor_gbs=None, require_efa=True))[
        "all_reduce network"].measured == "none"


def test_a_libfabric_channel_alone_proves_the_network():
    channels = replace(EFA, networks=(), libfabric_channels=True)
    assert "all_reduce network" not in by_name(nccl_checks(run(evidence=channels), SPEC, floor_gbs=None,
                                                           require_efa=True))


def test_no_gdrdma_channel_is_monitored_as_gpudirect_not_shown():
    check = by_name(nccl_checks(run(evidence=replace(EFA, gdrdma=False)), SPEC, floor_gbs=None, require_efa=True))[
        "all_reduce GPUDirect RDMA"]
    assert check == Check("all_reduce GPUDirect RDMA", MONITOR, "no", "GDRDMA", "",
                          "all_reduce: no NET/Libfabric/N/GDRDMA channel: GPUDirect RDMA not shown in use")


# --- fi_pingpong -------------------------------------------------------------------------------


def pp(latency_us: float = 10.0, lost: int = 0, **kw) -> PingpongRun:
    row = PingpongRow(64, 10, 10 - lost, lost, 640, 0.01, 1.0, latency_us, 0.1)
    return PingpongRun(PingpongResult((PingpongTable(None, (row,)),), **kw), kw.get("exit_code", 0))


def test_a_hung_pingpong_shows_the_timeout():
    checks = by_name(pingpong_checks(PingpongRun(None, None, timed_out=True), SPEC))
    assert checks["fi_pingpong finished"] == Check("fi_pingpong finished", ISOLATE, "timeout", None, "",
                                                   "fi_pingpong hung and was stopped at its timeout")
    assert checks["fi_pingpong output"].detail == "fi_pingpong left no readable output: nothing came back"


def test_a_pingpong_exit_code_is_one_row_not_also_a_result_failure():
    checks = pingpong_checks(pp(exit_code=2), SPEC, label="loopback")
    assert [c.name for c in checks if c.verdict is ISOLATE] == ["loopback exit code"]
    assert by_name(checks)["loopback exit code"] == Check("loopback exit code", ISOLATE, 2, 0, "",
                                                          "loopback exited with code 2")


def test_a_pingpong_whose_exit_code_is_unknown_judges_the_output_alone():
    checks = pingpong_checks(PingpongRun(PingpongResult((PingpongTable(None, ()),), exit_code=7), None), SPEC)
    assert checks == [Check("fi_pingpong result", ISOLATE, None, None, "", "fi_pingpong: exit code 7")]
    empty = pingpong_checks(PingpongRun(PingpongResult((PingpongTable(None, ()),)), None), SPEC)
    assert empty == [Check("fi_pingpong result", ISOLATE, None, None, "", "fi_pingpong: no result rows")]


def test_the_latency_row_shows_microseconds_against_the_limit():
    assert by_name(pingpong_checks(pp(12.5), SPEC))["fi_pingpong latency"] == Check(
        "fi_pingpong latency", PASS, 12.5, 50.0, "us", "")
    assert by_name(pingpong_checks(pp(50.25), SPEC))["fi_pingpong latency"] == Check(
        "fi_pingpong latency", ISOLATE, 50.25, 50.0, "us", "fi_pingpong latency 50.25 us exceeds 50 us")


def test_lost_messages_are_monitored_and_other_result_failures_isolate():
    checks = pingpong_checks(pp(lost=2), SPEC)
    assert by_name(checks)["fi_pingpong result"] == Check("fi_pingpong result", MONITOR, None, None, "",
                                                          "fi_pingpong: 2 messages sent but never acknowledged")
    errored = pingpong_checks(pp(errors=("fi_getinfo: -61",)), SPEC)
    assert by_name(errored)["fi_pingpong result"].verdict is ISOLATE


# --- layer 1: inventory ------------------------------------------------------------------------


GPUS = parse_nvidia_smi(read("nvidia_smi_query_p5en.csv"))
SIXTEEN = parse_fi_info(read("fi_info_p5en_16_nics.txt"))


def test_inventory_rows_show_the_counts_found_against_the_blueprint():
    rec = judge_inventory("a", GPUS, SIXTEEN, SPEC)
    assert (rec.scope, rec.subject, rec.nodes, rec.verdict) == ("node", "a", ("a",), PASS)
    assert by_name(rec.checks) == {"GPUs": Check("GPUs", PASS, 8, 8, "", ""),
                                   "EFA devices": Check("EFA devices", PASS, 16, 16, "", "")}


def test_a_node_with_a_gpu_missing_is_isolated_with_the_count():
    rec = judge_inventory("a", GPUS, SIXTEEN, FabricSpec(gpus=9))
    assert by_name(rec.checks)["GPUs"] == Check("GPUs", ISOLATE, 8, 9, "", "8 GPUs found, 9 expected")


def test_too_many_efa_devices_is_monitored_with_the_count():
    rec = judge_inventory("a", GPUS, SIXTEEN, FabricSpec(efa_devices=15))
    assert by_name(rec.checks)["EFA devices"] == Check("EFA devices", MONITOR, 16, 15, "",
                                                       "16 efa devices found, 15 expected")


def test_the_provider_counted_is_the_one_asked_for():
    rec = judge_inventory("a", GPUS, SIXTEEN, SPEC, provider="tcp")  # the listing has 16 efa devices, no tcp one
    assert by_name(rec.checks)["EFA devices"] == Check("EFA devices", ISOLATE, 0, 16, "",
                                                       "0 tcp devices found, 16 expected")


def test_missing_listings_say_which_tool_failed():
    rec = judge_inventory("a", None, None, SPEC)
    assert by_name(rec.checks) == {
        "GPUs": Check("GPUs", ISOLATE, None, 8, "", "no GPU inventory: nvidia-smi failed"),
        "EFA devices": Check("EFA devices", ISOLATE, None, 16, "", "no fi_info listing: fi_info failed")}


# --- layer 2: NICs, and the negative control ---------------------------------------------------


def test_each_nic_is_its_own_record_on_its_node():
    (rec,) = judge_nics({("a", "rdmap16s27"): pp(9.0)}, SPEC)
    assert (rec.scope, rec.subject, rec.nodes, rec.verdict) == ("nic", "a/rdmap16s27", ("a",), PASS)
    assert [c.name for c in rec.checks] == ["loopback latency"]


def test_a_slow_nic_is_an_outlier_with_its_latency_against_the_fleet_median():
    runs = {("a", f"n{i}"): pp(10.0 + 0.1 * i) for i in range(6)} | {("b", "slow"): pp(40.0)}
    recs = {r.subject: r for r in judge_nics(runs, SPEC)}
    assert recs["b/slow"].verdict is MONITOR
    (outlier,) = [c for c in recs["b/slow"].checks if c.name == "loopback latency outlier"]
    assert (outlier.verdict, outlier.measured, outlier.threshold, outlier.unit) == (MONITOR, 40.0, 10.3, "us")
    assert outlier.detail.startswith("latency 40.00 us vs fleet median 10.30 us (robust score +")
    assert all(r.verdict is PASS for s, r in recs.items() if s != "b/slow")


def test_a_fast_nic_is_no_outlier():
    runs = {("a", f"n{i}"): pp(10.0 + 0.1 * i) for i in range(6)} | {("b", "fast"): pp(1.0)}
    assert all(r.verdict is PASS for r in judge_nics(runs, SPEC))


def test_nics_without_a_latency_are_left_out_of_the_outlier_figures():
    runs = {("a", f"n{i}"): pp(10.0 + 0.1 * i) for i in range(6)} | {("b", "dead"): PingpongRun(None, 1)}
    recs = {r.subject: r for r in judge_nics(runs, SPEC)}
    assert recs["b/dead"].verdict is ISOLATE
    assert all(r.verdict is PASS for s, r in recs.items() if s != "b/dead")


def test_the_negative_control_row_says_it_must_fail():
    failed = negative_control("a", PingpongRun(None, 1))
    assert (failed.scope, failed.subject, failed.nodes) == ("node", "a", ("a",))
    assert failed.checks == (Check("negative control", PASS, "failed", "must fail", "", ""),)
    passed = negative_control("a", pp())
    assert passed.checks == (Check("negative control", ISOLATE, "passed", "must fail", "",
                                   "a loopback pinned to a nonexistent NIC passed: NIC pinning is not in effect"),)


@pytest.mark.parametrize("ended", [PingpongRun(None, None, timed_out=True), PingpongRun(None, 0),
                                   PingpongRun(parse_pingpong(read("fi_pingpong_modal_2x_h100.txt")), 2)])
def test_a_negative_control_that_hung_left_nothing_or_exited_non_zero_failed_as_it_must(ended):
    assert negative_control("a", ended).verdict is PASS


# --- layers 3-5: single nodes, pairs, the whole set --------------------------------------------


def test_the_pair_floors_are_the_blueprints_per_collective():
    spec = FabricSpec(pair_allreduce_busbw_gbs=1.0, pair_alltoall_busbw_gbs=2.0, pair_sendrecv_busbw_gbs=3.0)
    assert pair_floors(spec) == {"all_reduce": 1.0, "alltoall": 2.0, "sendrecv": 3.0}


def test_each_collective_across_a_pair_is_held_to_its_own_floor():
    runs = PairRuns(nccl=(run(65.0, "alltoall_perf"), run(45.0, "sendrecv_perf"), run(310.0, "all_reduce_perf")))
    (rec,) = judge_pairs({("a", "b"): runs}, SPEC)
    floors = {c.name: c.threshold for c in rec.checks if "busbw" in c.name}
    assert floors == {"alltoall busbw @ 1 GiB": 60.0, "sendrecv busbw @ 1 GiB": 40.0, "all_reduce busbw @ 1 GiB": 300.0}
    assert (rec.scope, rec.subject, rec.nodes, rec.verdict) == ("pair", "a<->b", ("a", "b"), PASS)


def test_a_collective_without_a_pair_floor_is_shown_not_judged():
    (rec,) = judge_pairs({("a", "b"): PairRuns(nccl=(run(1.0, "broadcast_perf"),))}, SPEC)
    assert by_name(rec.checks)["broadcast busbw @ 1 GiB"] == Check("broadcast busbw @ 1 GiB", PASS, 1.0, None, "GB/s")


def test_a_pair_with_nothing_run_across_it_isolates():
    (rec,) = judge_pairs({("a", "b"): PairRuns()}, SPEC)
    assert rec.checks == (Check("tests run", ISOLATE, 0, None, "", "no test ran across this pair"),)


def test_a_pairs_pingpong_is_judged_with_its_collectives():
    (rec,) = judge_pairs({("a", "b"): PairRuns(nccl=(run(),), pingpong=pp(60.0))}, SPEC)
    assert rec.verdict is ISOLATE and by_name(rec.checks)["fi_pingpong latency"].verdict is ISOLATE


def pairs_with(slow: float) -> dict:
    names = "bcdefg"
    runs = {("a", n): PairRuns(nccl=(run(400.0 + i, "all_reduce_perf"),)) for i, n in enumerate(names)}
    runs[("a", "z")] = PairRuns(nccl=(run(slow, "all_reduce_perf"),))
    return runs


def test_a_pair_far_below_the_others_is_monitored_with_its_figure_against_the_median():
    recs = {r.subject: r for r in judge_pairs(pairs_with(310.0), SPEC)}
    (outlier,) = [c for c in recs["a<->z"].checks if c.name == "all_reduce busbw @ 1 GiB outlier"]
    assert (outlier.verdict, outlier.measured, outlier.threshold, outlier.unit) == (MONITOR, 310.0, 402.0, "GB/s")
    assert outlier.detail.startswith("all_reduce busbw @ 1 GiB 310.00 GB/s vs median 402.00 GB/s (robust score -")
    assert outlier.detail.endswith(", threshold -3.5)")


def test_a_pair_far_above_the_others_is_no_outlier():
    assert all(r.verdict is PASS for r in judge_pairs(pairs_with(900.0), SPEC))


def test_a_nan_bandwidth_takes_no_part_in_the_outlier_figures():
    recs = {r.subject: r for r in judge_pairs(pairs_with(math.nan), SPEC)}
    assert recs["a<->z"].verdict is ISOLATE
    assert all(r.verdict is PASS for s, r in recs.items() if s != "a<->z")


def test_a_single_node_is_held_to_the_single_node_floor_without_efa():
    (rec,) = judge_single_nodes({"a": run(430.0, evidence=NetEvidence())}, SPEC)
    assert (rec.scope, rec.subject, rec.nodes, rec.verdict) == ("node", "a", ("a",), ISOLATE)
    assert by_name(rec.checks)["all_reduce busbw @ 1 GiB"].threshold == 431.0
    assert not [c for c in rec.checks if "EFA" in c.name or "network" in c.name]


def test_a_single_node_far_below_its_peers_is_monitored_and_a_nan_node_is_no_peer():
    runs = {n: run(470.0 + i) for i, n in enumerate("abcdef")} | {"slow": run(440.0), "nan": run(math.nan)}
    verdicts = {r.subject: r.verdict for r in judge_single_nodes(runs, SPEC)}
    assert verdicts == {**{n: PASS for n in "abcdef"}, "slow": MONITOR, "nan": ISOLATE}


def test_the_whole_set_needs_efa_evidence_only_across_nodes_and_floors_only_when_given():
    one = judge_full_set(["a"], [run(1.0, evidence=NetEvidence())], SPEC)
    assert (one.scope, one.subject, one.nodes, one.verdict) == ("set", "all", ("a",), PASS)
    two = judge_full_set(["a", "b"], [run(1.0)], SPEC)
    assert two.verdict is PASS and "all_reduce EFA provider" in by_name(two.checks)
    floored = judge_full_set(["a", "b"], [run(1.0)], SPEC, floors={"all_reduce": 2.0})
    assert floored.verdict is ISOLATE


def test_a_whole_set_with_no_collective_run_isolates():
    rec = judge_full_set(["a", "b"], [], SPEC)
    assert rec.checks == (Check("tests run", ISOLATE, 0, None, "", "no collective ran over the whole set"),)


# --- more boundaries ---------------------------------------------------------------------------


def test_every_network_seen_is_named_when_none_is_libfabric():
    two = replace(EFA, networks=("IB", "Socket"), libfabric_channels=False)
    check = by_name(nccl_checks(run(evidence=two), SPEC, floor_gbs=None, require_efa=True))["all_reduce network"]
    assert check.measured == "IB, Socket"
    assert check.detail == "all_reduce: NCCL log lacks 'Using network Libfabric' (networks: IB, Socket)"


def test_a_pingpong_without_output_is_one_row_with_no_unit():
    assert pingpong_checks(PingpongRun(None, 0, error="ssh: connection lost"), SPEC, label="loopback") == [
        Check("loopback output", ISOLATE, None, None, "", "loopback left no readable output: ssh: connection lost")]


def gpus(*models_and_drivers, error=None):
    from tasks.parsing.nvidia_smi import GpuInfo, GpuInventory

    return GpuInventory(tuple(GpuInfo(i, name, f"GPU-{i}", driver) for i, (name, driver) in enumerate(models_and_drivers)),
                        error)


def test_a_short_gpu_count_carries_nvidia_smis_own_message():
    rec = judge_inventory("a", gpus(("H200", "570.1"), error="Unable to determine the device handle for GPU1"),
                          SIXTEEN, SPEC)
    assert by_name(rec.checks)["GPUs"].detail == ("1 GPUs found, 8 expected (Unable to determine the device handle "
                                                  "for GPU1)")


def test_mixed_gpu_models_and_drivers_on_one_node_are_each_monitored_naming_them():
    mixed = gpus(*[("H200", "570.1")] * 7, ("H100", "565.9"))
    rec = judge_inventory("a", mixed, SIXTEEN, SPEC)
    assert rec.verdict is MONITOR
    assert by_name(rec.checks)["GPU model"] == Check("GPU model", MONITOR, "H200, H100", "one", "",
                                                     "mixed GPU models on one node: H200, H100")
    assert by_name(rec.checks)["driver version"] == Check("driver version", MONITOR, "570.1, 565.9", "one", "",
                                                          "mixed driver versions on one node: 570.1, 565.9")


def test_a_short_efa_count_carries_fi_infos_own_message():
    from tasks.parsing.fi_info import FiInfoEntry, FiInfoResult

    one_nic = FiInfoResult((FiInfoEntry("efa", "efa", "rdmap16s27-rdm", ep_type="FI_EP_RDM"),),
                           error="fi_getinfo: -61 (No data available)")
    rec = judge_inventory("a", gpus(*[("H200", "570.1")] * 8), one_nic, SPEC)
    assert by_name(rec.checks)["EFA devices"] == Check(
        "EFA devices", ISOLATE, 1, 16, "", "1 efa devices found, 16 expected (fi_getinfo: -61 (No data available))")


def test_a_node_whose_sweep_stopped_short_or_left_no_output_is_no_peer_for_the_outliers():
    runs = {"none": NcclRun("all_reduce_perf", None, 1), "short": NcclRun("all_reduce_perf", result(470.0, size=1 << 20), 0)}
    runs |= {n: run(470.0 + i) for i, n in enumerate("abcdef")} | {"slow": run(440.0)}
    verdicts = {r.subject: r.verdict for r in judge_single_nodes(runs, SPEC)}
    assert verdicts == {"none": ISOLATE, "short": ISOLATE, **{n: PASS for n in "abcdef"}, "slow": MONITOR}


def test_a_single_node_outlier_row_names_the_collective_and_size_against_the_median():
    runs = {n: run(470.0 + i) for i, n in enumerate("abcdef")} | {"slow": run(440.0)}
    rec = {r.subject: r for r in judge_single_nodes(runs, SPEC)}["slow"]
    (outlier,) = [c for c in rec.checks if c.verdict is MONITOR]
    assert (outlier.name, outlier.measured, outlier.threshold, outlier.unit) == (
        "all_reduce busbw @ 1 GiB outlier", 440.0, 472.0, "GB/s")
    assert outlier.detail.startswith("all_reduce busbw @ 1 GiB 440.00 GB/s vs median 472.00 GB/s (robust score -")


def test_every_collective_over_the_whole_set_is_judged_not_only_the_last():
    rec = judge_full_set(["a", "b"], [run(1.0, "alltoall_perf", exit_code=1), run(400.0)], SPEC)
    assert rec.verdict is ISOLATE
    assert {c.name for c in rec.checks} >= {"alltoall exit code", "all_reduce busbw @ 1 GiB"}
