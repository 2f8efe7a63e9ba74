"""Fabric planning: who tests with whom, how failures are pinned on nodes, and the verdicts."""

import itertools
import json
import math
from dataclasses import replace

import pytest

from blueprints.schema import FabricSpec
from tasks.parsing.fi_info import parse_fi_info
from tasks.parsing.nccl_model import Measurement, NcclResult, NcclRow, NetEvidence
from tasks.parsing.nccl_tests import parse_nccl_tests
from tasks.parsing.nvidia_smi import parse_nvidia_smi
from tasks.parsing.pingpong import parse_pingpong
from tasks.planning.fabric import (
    NcclRun, PairRuns, PingpongRun, Verdict, attribute_pairs, bisect, find_bad_nodes,
    judge_full_set, judge_inventory, judge_nics, judge_pairs, judge_single_nodes, negative_control,
    node_verdicts, outliers, robust_scores, round_robin_rounds, second_pass_rounds,
    settle_second_pass, to_json,
)
from tests.unit.parsing.samples import read

GIB = 1 << 30
SPEC = FabricSpec()
EFA = NetEvidence(providers=("efa",), fabrics=("efa-direct",), networks=("Libfabric",),
                  libfabric_channels=True, gdrdma=True)


def nccl(busbw_1g: float, *, wrong: int = 0, evidence: NetEvidence = EFA, oob_ok: bool = True,
         complete: bool = True) -> NcclResult:
    """A result whose 1 GiB row reads busbw_1g (smaller rows slower, as in a real sweep)."""
    rows = tuple(NcclRow(size, size // 4, "float", "sum", -1,
                         Measurement(1.0, busbw_1g * f / 2, busbw_1g * f, wrong if size == GIB else 0),
                         Measurement(1.0, busbw_1g * f / 2, busbw_1g * f, 0))
                 for size, f in ((GIB // 2, 0.9), (GIB, 1.0), (2 * GIB, 1.02)))
    return NcclResult("text", collective="all_reduce_perf", rows=rows, evidence=evidence,
                      out_of_bounds=(0 if oob_ok else 1) if complete else None,
                      out_of_bounds_ok=oob_ok if complete else None)


def pair_runs(all_reduce=450.0, alltoall=80.0, sendrecv=45.0, **kw) -> PairRuns:
    return PairRuns(nccl=(NcclRun("all_reduce", nccl(all_reduce, **kw), 0),
                          NcclRun("alltoall_perf", nccl(alltoall, **kw), 0),
                          NcclRun("sendrecv", nccl(sendrecv, **kw), 0)),
                    pingpong=PingpongRun(parse_pingpong(read("fi_pingpong_modal_2x_h100.txt"), 0), 0))


def check_names(rec, verdict):
    return [c.name for c in rec.checks if c.verdict is verdict]


# --- pairing -------------------------------------------------------------------------


def assert_tournament(nodes, rounds):
    seen = [frozenset(p) for rnd in rounds for p in rnd]
    assert sorted(map(sorted, seen)) == sorted(map(sorted, map(frozenset, itertools.combinations(nodes, 2))))
    for rnd in rounds:
        members = [n for p in rnd for n in p]
        assert len(members) == len(set(members)), f"a node plays twice in {rnd}"


def test_four_nodes_play_three_rounds_of_two_disjoint_pairs_covering_all_six_pairs_once():
    nodes = ["a", "b", "c", "d"]
    rounds = round_robin_rounds(nodes)
    assert len(rounds) == 3 and all(len(r) == 2 for r in rounds)
    assert_tournament(nodes, rounds)


def test_eight_nodes_play_seven_rounds_of_four_pairs():
    nodes = [f"n{i}" for i in range(8)]
    rounds = round_robin_rounds(nodes)
    assert len(rounds) == 7 and all(len(r) == 4 for r in rounds)
    assert_tournament(nodes, rounds)


@pytest.mark.parametrize("n", range(2, 14))
def test_every_fleet_size_gets_every_pair_exactly_once(n):
    nodes = [f"n{i}" for i in range(n)]
    rounds = round_robin_rounds(nodes)
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)
    assert_tournament(nodes, rounds)


def test_with_an_odd_count_each_node_sits_out_exactly_one_round():
    nodes = ["a", "b", "c", "d", "e"]
    rounds = round_robin_rounds(nodes)
    assert len(rounds) == 5 and all(len(r) == 2 for r in rounds)
    sat_out = [next(n for n in nodes if all(n not in p for p in rnd)) for rnd in rounds]
    assert sorted(sat_out) == nodes


def test_fewer_than_two_nodes_need_no_rounds_and_repeated_names_are_refused():
    assert round_robin_rounds(["a"]) == () and round_robin_rounds([]) == ()
    with pytest.raises(ValueError, match="repeated: a"):
        round_robin_rounds(["a", "b", "a"])


def test_the_second_pass_pairs_each_suspect_with_a_known_good_node_it_has_not_met():
    rounds = second_pass_rounds(["a", "b"], ["c", "d"], already_tested=[("a", "c"), ("b", "d")])
    assert rounds == ((("a", "d"), ("b", "c")),)


def test_more_suspects_than_good_nodes_take_several_disjoint_rounds():
    rounds = second_pass_rounds(["a", "b", "c"], ["g"])
    assert rounds == ((("a", "g"),), (("b", "g"),), (("c", "g"),))
    assert second_pass_rounds(["a"], []) == ()


def test_bisection_splits_the_set_in_halves():
    assert bisect(["a", "b", "c", "d", "e"]) == (("a", "b", "c"), ("d", "e"))


# --- the bad-node finder ---------------------------------------------------------------


def test_the_node_common_to_the_failing_pairs_is_bad():
    nodes = ["a", "b", "c", "d"]
    failed = {p: "c" in p for rnd in round_robin_rounds(nodes) for p in rnd}
    finding = find_bad_nodes(nodes, failed)
    assert finding.bad == ("c",) and finding.suspects == () and finding.good == ("a", "b", "d")
    assert "failed with every partner" in finding.reasons["c"]


def test_two_bad_nodes_among_six_are_both_found():
    nodes = [f"n{i}" for i in range(6)]
    failed = {p: bool({"n1", "n4"} & set(p)) for rnd in round_robin_rounds(nodes) for p in rnd}
    assert find_bad_nodes(nodes, failed).bad == ("n1", "n4")


def test_a_node_in_most_failing_pairs_is_bad_even_if_it_passed_once():
    nodes = ["a", "b", "c", "d", "e"]
    failed = {p: "a" in p and "e" not in p for rnd in round_robin_rounds(nodes) for p in rnd}
    finding = find_bad_nodes(nodes, failed)
    assert finding.bad == ("a",) and "common to 3 failing pairs" in finding.reasons["a"]


def test_a_single_failing_pair_makes_two_suspects_that_the_second_pass_tells_apart():
    nodes = ["a", "b", "c", "d"]
    first = {p: set(p) == {"a", "b"} for rnd in round_robin_rounds(nodes) for p in rnd}
    finding = find_bad_nodes(nodes, first)
    assert finding.bad == () and finding.suspects == ("a", "b") and finding.good == ("c", "d")
    (rnd,) = second_pass_rounds(finding.suspects, finding.good, first)
    settled = settle_second_pass(finding, {p: "a" in p for p in rnd})
    assert settled.bad == ("a",) and "b" in settled.good and settled.suspects == ()
    assert "failed again with known-good" in settled.reasons["a"]


def test_a_failing_pair_whose_nodes_both_pass_with_good_partners_is_an_unexplained_link():
    nodes = ["a", "b", "c", "d"]
    first = {p: set(p) == {"a", "b"} for rnd in round_robin_rounds(nodes) for p in rnd}
    finding = find_bad_nodes(nodes, first)
    settled = settle_second_pass(finding, {("a", "c"): False, ("b", "d"): False})
    assert settled.bad == () and settled.unexplained_pairs == (("a", "b"),)


# --- robust outliers ------------------------------------------------------------------------


def test_the_robust_score_is_0_6745_times_the_distance_from_the_median_over_the_mad():
    values = {"a": 480.0, "b": 478.0, "c": 470.0, "d": 300.0, "e": 482.0}
    # median 478, absolute deviations 2, 0, 8, 178, 4 -> MAD 4; the 1% floor (4.78) is larger
    assert robust_scores(values)["d"] == pytest.approx(0.6745 * (300 - 478) / 4.78)
    assert robust_scores(values, min_mad_fraction=0)["d"] == pytest.approx(0.6745 * (300 - 478) / 4)
    assert list(outliers(values, 3.5)) == ["d"]


def test_nodes_within_noise_of_each_other_are_not_outliers():
    assert outliers({"a": 480.0, "b": 479.9, "c": 480.0, "d": 479.0}, 3.5) == {}


def test_fewer_than_three_figures_or_nan_give_no_outliers():
    assert outliers({"a": 480.0, "b": 10.0}, 3.5) == {}
    assert "c" not in robust_scores({"a": 1.0, "b": 2.0, "c": math.nan, "d": 1.5})


def test_latency_outliers_are_on_the_high_side():
    values = {"a": 8.0, "b": 8.2, "c": 8.1, "d": 30.0}
    assert list(outliers(values, 3.5, "high")) == ["d"] and outliers(values, 3.5, "low") == {}


# --- verdicts ---------------------------------------------------------------------


def test_a_healthy_pair_passes_with_its_figures_against_the_floors():
    (rec,) = judge_pairs({("a", "b"): pair_runs()}, SPEC)
    assert rec.verdict is Verdict.PASS and rec.subject == "a<->b" and rec.nodes == ("a", "b")
    busbw = {c.name: (c.measured, c.threshold) for c in rec.checks if "busbw" in c.name}
    assert busbw == {"all_reduce busbw @ 1 GiB": (450.0, 300.0), "alltoall busbw @ 1 GiB": (80.0, 60.0),
                     "sendrecv busbw @ 1 GiB": (45.0, 40.0)}
    assert [(c.measured, c.threshold) for c in rec.checks if c.name == "fi_pingpong latency"] == [(17.3, 50.0)]


def test_bandwidth_below_the_blueprint_floor_isolates_the_pair():
    (rec,) = judge_pairs({("a", "b"): pair_runs(alltoall=41.0)}, SPEC)
    assert rec.verdict is Verdict.ISOLATE
    assert rec.reasons == ("alltoall busbw 41.00 GB/s at 1 GiB is below the 60 GB/s floor",)
    (rec,) = judge_pairs({("a", "b"): pair_runs(alltoall=41.0)}, FabricSpec(pair_alltoall_busbw_gbs=40.0))
    assert rec.verdict is Verdict.PASS


@pytest.mark.parametrize("runs, reason", [
    (pair_runs(wrong=3), "wrong elements"),
    (pair_runs(oob_ok=False), "out of bounds values: 1 FAILED"),
    (pair_runs(complete=False), "did not finish"),
    (pair_runs(evidence=NetEvidence()), "lacks 'NET/OFI Selected provider is efa'"),
    (pair_runs(evidence=replace(EFA, socket=True)), "fell back to TCP sockets"),
    (pair_runs(evidence=replace(EFA, networks=(), libfabric_channels=False)), "lacks 'Using network Libfabric'"),
])
def test_hard_failures_isolate_a_pair_whatever_its_bandwidth(runs, reason):
    (rec,) = judge_pairs({("a", "b"): runs}, SPEC)
    assert rec.verdict is Verdict.ISOLATE
    assert any(reason in r for r in rec.reasons), rec.reasons


def test_a_timeout_a_non_zero_exit_or_no_output_isolates():
    good = nccl(450.0)
    for run, reason in ((NcclRun("all_reduce", good, None, timed_out=True), "killed at its 600 s timeout"),
                        (NcclRun("all_reduce", good, 1), "exited with code 1"),
                        (NcclRun("all_reduce", None, None, error="connection reset"), "connection reset")):
        (rec,) = judge_pairs({("a", "b"): PairRuns(nccl=(run,))}, SPEC)
        assert rec.verdict is Verdict.ISOLATE and any(reason in r for r in rec.reasons), rec.reasons


def test_missing_gpudirect_evidence_is_only_monitored():
    (rec,) = judge_pairs({("a", "b"): pair_runs(evidence=replace(EFA, gdrdma=False))}, SPEC)
    assert rec.verdict is Verdict.MONITOR


def test_published_pair_output_without_info_lines_cannot_prove_efa():
    run = NcclRun("all_reduce", parse_nccl_tests(read("nccl_allreduce_2x_p5_slurm.txt")), 0)
    (rec,) = judge_pairs({("a", "b"): PairRuns(nccl=(run,))}, SPEC)
    assert rec.verdict is Verdict.ISOLATE
    assert [(c.measured, c.threshold) for c in rec.checks if "busbw" in c.name] == [(436.95, 300.0)]


def test_a_hung_pair_test_from_real_output_isolates_with_the_timeout():
    run = NcclRun("all_reduce", parse_nccl_tests(read("nccl_allreduce_pair_timeout.txt")), 124, timed_out=True)
    (rec,) = judge_pairs({("a", "b"): PairRuns(nccl=(run,))}, SPEC)
    assert rec.verdict is Verdict.ISOLATE
    assert any("no progress for 30 s" in r for r in rec.reasons)


def test_a_pair_far_below_the_others_is_an_outlier_even_above_the_floor():
    nodes = [f"n{i}" for i in range(6)]
    runs = {p: pair_runs(all_reduce=330.0 if "n5" in p else 450.0 + i) for i, p in
            enumerate(p for rnd in round_robin_rounds(nodes) for p in rnd)}
    recs = {r.subject: r for r in judge_pairs(runs, SPEC)}
    slow = [s for s, r in recs.items() if r.verdict is Verdict.MONITOR]
    assert sorted(slow) == sorted(s for s in recs if "n5" in s)
    assert all("all_reduce busbw @ 1 GiB outlier" in check_names(recs[s], Verdict.MONITOR) for s in slow)


def test_the_outlier_threshold_comes_from_the_blueprint():
    runs = {("a", "b"): pair_runs(), ("c", "d"): pair_runs(all_reduce=452.0),
            ("e", "f"): pair_runs(all_reduce=451.0), ("g", "h"): pair_runs(all_reduce=432.0)}
    assert all(r.verdict is Verdict.PASS for r in judge_pairs(runs, SPEC))
    lenient = {r.subject: r.verdict for r in judge_pairs(runs, FabricSpec(outlier_mad_threshold=1.0))}
    assert lenient["g<->h"] is Verdict.MONITOR


def test_a_node_with_a_slow_link_is_isolated_and_the_others_pass():
    nodes = ["a", "b", "c", "d"]
    runs = {p: pair_runs(all_reduce=160.0, alltoall=30.0) if "c" in p else pair_runs()
            for rnd in round_robin_rounds(nodes) for p in rnd}
    pair_recs = judge_pairs(runs, SPEC)
    finding, node_recs = attribute_pairs(nodes, pair_recs)
    assert finding.bad == ("c",)
    verdicts = {r.subject: r.verdict for r in node_recs}
    assert verdicts == {"a": Verdict.PASS, "b": Verdict.PASS, "c": Verdict.ISOLATE, "d": Verdict.PASS}
    (evidence,) = [r for r in node_recs if r.subject == "c"][0].reasons
    assert "failed with every partner" in evidence and "below the 300 GB/s floor" in evidence


def test_the_second_pass_settles_a_single_failing_pair():
    nodes = ["a", "b", "c", "d"]
    runs = {p: pair_runs(wrong=5) if set(p) == {"a", "b"} else pair_runs()
            for rnd in round_robin_rounds(nodes) for p in rnd}
    first = judge_pairs(runs, SPEC)
    finding, recs = attribute_pairs(nodes, first)
    assert finding.suspects == ("a", "b")
    assert {r.subject: r.verdict for r in recs}["a"] is Verdict.MONITOR
    (rnd,) = second_pass_rounds(finding.suspects, finding.good, runs)
    second = judge_pairs({p: pair_runs(wrong=5) if "b" in p else pair_runs() for p in rnd}, SPEC)
    finding, recs = attribute_pairs(nodes, first, second)
    assert finding.bad == ("b",)
    assert {r.subject: r.verdict for r in recs} == {"a": Verdict.PASS, "b": Verdict.ISOLATE,
                                                     "c": Verdict.PASS, "d": Verdict.PASS}


def test_the_single_node_layer_judges_the_floor_at_1_gib_without_asking_for_efa():
    run = NcclRun("all_reduce", parse_nccl_tests(read("nccl_allreduce_bfloat16_1node_h200.txt")), 0)
    (rec,) = judge_single_nodes({"a": run}, SPEC)
    assert rec.verdict is Verdict.PASS
    assert [(c.measured, c.threshold) for c in rec.checks] == [(464.69, 431.0)]
    (rec,) = judge_single_nodes({"a": run}, FabricSpec(single_node_allreduce_busbw_gbs=480.0))
    assert rec.verdict is Verdict.ISOLATE


def test_a_single_node_well_below_its_peers_but_above_the_floor_is_monitored():
    runs = {n: NcclRun("all_reduce", nccl(v, evidence=NetEvidence()), 0)
            for n, v in {"a": 481.0, "b": 480.0, "c": 482.0, "d": 440.0}.items()}
    verdicts = {r.subject: r.verdict for r in judge_single_nodes(runs, SPEC)}
    assert verdicts == {"a": Verdict.PASS, "b": Verdict.PASS, "c": Verdict.PASS, "d": Verdict.MONITOR}


def test_inventory_passes_with_eight_gpus_and_sixteen_efa_devices():
    rec = judge_inventory("a", parse_nvidia_smi(read("nvidia_smi_query_p5en.csv")),
                          parse_fi_info(read("fi_info_p5en_16_nics.txt")), SPEC)
    assert rec.verdict is Verdict.PASS
    assert {c.name: (c.measured, c.threshold) for c in rec.checks} == {"GPUs": (8, 8), "EFA devices": (16, 16)}


def test_a_node_with_fifteen_efa_devices_is_isolated_at_inventory():
    fifteen = parse_fi_info(read("fi_info_p5en_16_nics.txt").replace("rdmap167s0-rdm", "rdmap79s0-rdm"))
    rec = judge_inventory("a", parse_nvidia_smi(read("nvidia_smi_query_p5en.csv")), fifteen, SPEC)
    assert rec.verdict is Verdict.ISOLATE and rec.reasons == ("15 efa devices found, 16 expected",)


def test_a_broken_driver_or_a_missing_listing_isolates_and_a_mixed_driver_is_monitored():
    broken = parse_nvidia_smi("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
    efa = parse_fi_info(read("fi_info_p5en_16_nics.txt"))
    assert judge_inventory("a", broken, efa, SPEC).verdict is Verdict.ISOLATE
    assert judge_inventory("a", None, None, SPEC, error="ssh: timed out").reasons == (
        "no GPU inventory: ssh: timed out", "no fi_info listing: ssh: timed out")
    mixed = parse_nvidia_smi(read("nvidia_smi_query_p5en.csv").replace(
        "570.133.20, 143771 MiB, 00000000:CA", "570.124.06, 143771 MiB, 00000000:CA"))
    assert judge_inventory("a", mixed, efa, SPEC).verdict is Verdict.MONITOR


def test_nic_loopbacks_fail_on_exit_code_and_a_slow_nic_is_an_outlier():
    ok = parse_pingpong(read("fi_pingpong_efa_test_loopback.txt"), 0)
    slow = parse_pingpong(read("fi_pingpong_efa_test_loopback.txt").replace("8.00", "31.00")
                          .replace("8.35", "31.35").replace("8.30", "31.30").replace("8.60", "31.60")
                          .replace("8.65", "31.65"), 0)
    runs = {("a", f"rdmap{i}s0"): PingpongRun(ok, 0) for i in range(5)}
    runs[("a", "rdmap5s0")] = PingpongRun(slow, 0)
    runs[("b", "rdmap0s0")] = PingpongRun(None, 124, timed_out=True, error="killed at 180 s")
    recs = {r.subject: r for r in judge_nics(runs, SPEC)}
    assert recs["a/rdmap0s0"].verdict is Verdict.PASS
    assert recs["a/rdmap5s0"].verdict is Verdict.MONITOR
    assert recs["b/rdmap0s0"].verdict is Verdict.ISOLATE and recs["b/rdmap0s0"].nodes == ("b",)


def test_a_negative_control_that_passes_means_nic_pinning_is_not_in_effect():
    refused = parse_pingpong(read("fi_pingpong_connect_refused_libfabric117.txt"), 111)
    assert negative_control("a", PingpongRun(refused, 111)).verdict is Verdict.PASS
    passed = PingpongRun(parse_pingpong(read("fi_pingpong_efa_test_loopback.txt"), 0), 0)
    rec = negative_control("a", passed)
    assert rec.verdict is Verdict.ISOLATE and "pinning is not in effect" in rec.reasons[0]


def test_the_full_set_is_judged_on_hard_conditions_and_efa_evidence():
    good = judge_full_set(["a", "b", "c", "d"], [NcclRun("all_reduce", nccl(350.0), 0),
                                                 NcclRun("alltoall", nccl(50.0), 0)], SPEC)
    assert good.verdict is Verdict.PASS and good.scope == "set"
    bad = judge_full_set(["a", "b"], [NcclRun("alltoall", nccl(50.0, wrong=1), 0)], SPEC,
                         floors={"alltoall": 60.0})
    assert bad.verdict is Verdict.ISOLATE and len(bad.reasons) == 2


def test_node_verdicts_gather_every_layer_and_keep_the_worst():
    inv = judge_inventory("a", parse_nvidia_smi(read("nvidia_smi_query_p5en.csv")),
                          parse_fi_info(read("fi_info_p5en_16_nics.txt")), SPEC)
    nics = judge_nics({("a", "rdmap79s0"): PingpongRun(None, 1, error="no output")}, SPEC)
    recs = node_verdicts(["a", "b"], [inv], nics)
    assert recs[0].verdict is Verdict.ISOLATE
    assert "a/rdmap79s0: loopback exit code" in [c.name for c in recs[0].checks]
    assert recs[1].checks == ()


def test_verdict_records_serialise_to_plain_json_for_the_report():
    recs = judge_pairs({("a", "b"): pair_runs(alltoall=41.0)}, SPEC)
    data = to_json(recs)
    assert json.loads(json.dumps(data)) == data
    assert data[0]["verdict"] == "ISOLATE" and data[0]["reasons"]
    assert data[0]["checks"][0]["verdict"] in ("PASS", "MONITOR", "ISOLATE")


def test_parsers_and_fabric_planning_import_no_vendor_sdk():
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys, tasks.parsing, tasks.planning.fabric; "
            "print(sorted(m for m in ('prefect', 'boto3', 'botocore', 'paramiko', 'kubernetes') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[2], check=True)
    assert out.stdout.strip() == "[]"
