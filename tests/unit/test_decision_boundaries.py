"""The decision boundaries of the fabric judge, the tool parsers, the Capacity Block chooser, the
planning numbers and the blueprint rules: each behaviour stated, at its edge."""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import replace
from pathlib import Path

import pytest

from blueprints.loader import load_blueprint, parse_blueprint
from blueprints.schema import FabricSpec, GqaAttention, SloSpec
from tasks.errors import BlueprintError, ConfigError, ParseError
from tasks.parsing.fi_info import parse_fi_info
from tasks.parsing.nccl_model import Measurement, NcclResult, NcclRow, NetEvidence, busbw_at
from tasks.parsing.nccl_tests import parse_nccl_tests
from tasks.parsing.nvidia_smi import parse_nvidia_smi
from tasks.parsing.pingpong import parse_pingpong
from tasks.planning import capacity_math, ec2_requests
from tasks.planning.approval import check_capacity_block_approval
from tasks.planning.fabric import NcclRun, PingpongRun, Verdict, judge_full_set, judge_inventory, negative_control
from tasks.planning.fabric.judge import nccl_checks, pingpong_checks
from tasks.planning.metrics import summarize
from tasks.planning.staging import ListedObject, build_manifest
from tests.unit.bench.helpers import record
from tests.unit.parsing.samples import read

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = load_blueprint(ROOT / "blueprints" / "glm51-fp8-2p2d.yaml")
REFERENCE_TEXT = (ROOT / "blueprints" / "glm51-fp8-2p2d.yaml").read_text()
GIB = 1 << 30
SPEC = FabricSpec()
EFA = NetEvidence(providers=("efa",), fabrics=("efa-direct",), networks=("Libfabric",), libfabric_channels=True,
                  gdrdma=True)


def nccl(busbw: float, evidence: NetEvidence = EFA, **result) -> NcclResult:
    row = NcclRow(GIB, GIB // 4, "float", "sum", -1, Measurement(1.0, busbw / 2, busbw, 0),
                  Measurement(1.0, busbw / 2, busbw, 0))
    return NcclResult("text", collective="all_reduce_perf", rows=(row,), evidence=evidence, out_of_bounds=0,
                      out_of_bounds_ok=True, **result)


# --- the fabric judge -----------------------------------------------------------------------


def test_a_nan_bus_bandwidth_at_the_judging_size_isolates():
    checks = nccl_checks(NcclRun("all_reduce", nccl(math.nan), 0), SPEC, floor_gbs=300.0, require_efa=False)
    (busbw,) = [c for c in checks if "busbw" in c.name]
    assert busbw.verdict is Verdict.ISOLATE


def test_a_bus_bandwidth_exactly_at_the_floor_passes_and_just_below_isolates():
    at = nccl_checks(NcclRun("all_reduce", nccl(300.0), 0), SPEC, floor_gbs=300.0, require_efa=False)
    below = nccl_checks(NcclRun("all_reduce", nccl(299.99), 0), SPEC, floor_gbs=300.0, require_efa=False)
    assert {c.verdict for c in at} == {Verdict.PASS}
    assert Verdict.ISOLATE in {c.verdict for c in below}


def test_a_whole_set_run_that_fell_back_to_tcp_sockets_isolates_but_one_node_needs_no_efa():
    sockets = NetEvidence(providers=("efa",), networks=("Socket",), socket=True)
    over_two = judge_full_set(["a", "b"], [NcclRun("all_reduce", nccl(500.0, sockets), 0)], SPEC)
    assert over_two.verdict is Verdict.ISOLATE and any("TCP sockets" in r for r in over_two.reasons)
    alone = judge_full_set(["a"], [NcclRun("all_reduce", nccl(500.0, NetEvidence()), 0)], SPEC)
    assert alone.verdict is Verdict.PASS


def test_more_efa_devices_than_expected_is_monitored_and_fewer_isolated():
    gpus = parse_nvidia_smi(read("nvidia_smi_query_p5en.csv"))
    sixteen = parse_fi_info(read("fi_info_p5en_16_nics.txt"))
    assert judge_inventory("a", gpus, sixteen, SPEC.model_copy(update={'efa_devices': 15})).verdict is Verdict.MONITOR
    assert judge_inventory("a", gpus, sixteen, SPEC.model_copy(update={'efa_devices': 17})).verdict is Verdict.ISOLATE
    assert judge_inventory("a", gpus, sixteen, SPEC).verdict is Verdict.PASS


def _pingpong() -> PingpongRun:
    return PingpongRun(parse_pingpong(read("fi_pingpong_modal_2x_h100.txt"), 0), 0)


def test_a_pingpong_latency_exactly_at_the_limit_passes_and_above_it_isolates():
    run = _pingpong()
    latency = run.result.latency_us()
    at = pingpong_checks(run, SPEC.model_copy(update={'max_pingpong_latency_us': latency}))
    under = pingpong_checks(run, SPEC.model_copy(update={'max_pingpong_latency_us': latency * 0.999}))
    assert {c.verdict for c in at} == {Verdict.PASS}
    assert [c.verdict for c in under if c.name.endswith("latency")] == [Verdict.ISOLATE]


def test_messages_sent_but_never_acknowledged_are_monitored_not_isolated():
    run = _pingpong()
    table = run.result.tables[0]
    lossy = replace(table, rows=(replace(table.rows[0], lost=2),) + table.rows[1:])
    checks = pingpong_checks(PingpongRun(replace(run.result, tables=(lossy,) + run.result.tables[1:]), 0), SPEC)
    assert [c.verdict for c in checks if "never acknowledged" in c.detail] == [Verdict.MONITOR]
    assert Verdict.ISOLATE not in {c.verdict for c in checks}


def test_a_negative_control_that_exits_0_but_reports_errors_counts_as_failed():
    run = _pingpong()
    errored = PingpongRun(replace(run.result, errors=("fi_getinfo: -61 (No data available)",)), 0)
    assert negative_control("a", errored).verdict is Verdict.PASS     # the pinning refused the absent NIC
    assert negative_control("a", run).verdict is Verdict.ISOLATE      # a clean pass: pinning is not in effect


# --- the tool parsers ---------------------------------------------------------------------------


def test_the_bus_bandwidth_at_a_size_reported_twice_is_the_lower_one():
    rows = tuple(NcclRow(GIB, GIB // 4, dtype, "sum", -1, Measurement(1.0, bw / 2, bw, 0), None)
                 for dtype, bw in (("float", 440.0), ("half", 390.0)))
    result = NcclResult("text", collective="all_reduce_perf", rows=rows, evidence=EFA)
    assert busbw_at(result, GIB) == 390.0


def test_mixed_providers_are_not_efa():
    assert NetEvidence(providers=("efa", "efa")).efa_provider
    assert not NetEvidence(providers=("efa", "tcp")).efa_provider
    assert not NetEvidence().efa_provider


def test_out_of_bounds_values_fail_the_run_even_when_the_ok_flag_says_ok():
    assert any("out of bounds" in r for r in replace(nccl(450.0), out_of_bounds=3).hard_failures())
    assert not replace(nccl(450.0), out_of_bounds=0).hard_failures()


def test_a_nan_wrong_count_is_a_parse_error():
    text = read("nccl_allreduce_2x_p5_slurm.txt")
    line = next(l for l in text.splitlines() if l.strip().startswith("0:") and " 1073741824 " in l)
    tokens = line.split()
    tokens[9] = "nan"  # the out-of-place #wrong column of "0: size count type redop root time algbw busbw #wrong"
    broken = "   ".join(tokens)
    with pytest.raises(ParseError, match="#wrong"):
        parse_nccl_tests(text.replace(line, broken))


# --- the Capacity Block chooser and the purchase guard --------------------------------------------


T0 = dt.datetime(2026, 12, 7, tzinfo=dt.timezone.utc)


def _block_blueprint(limit: float):
    cap = REFERENCE.aws.capacity.model_copy(update={"mode": "capacity-block", "max_upfront_usd": limit})
    return REFERENCE.model_copy(update={"aws": REFERENCE.aws.model_copy(update={"capacity": cap})})


def _offer(oid: str, zone: str, fee: float, days: int) -> dict:
    return {"CapacityBlockOfferingId": oid, "AvailabilityZone": zone, "UpfrontFee": str(fee),
            "StartDate": T0 + dt.timedelta(days=days)}


def test_an_offering_whose_fee_equals_the_limit_is_affordable():
    assert ec2_requests.choose_capacity_block(_block_blueprint(20000), [_offer("cb-1", "us-east-2a", 20000, 0)]
                                              ).offering["CapacityBlockOfferingId"] == "cb-1"
    assert ec2_requests.choose_capacity_block(_block_blueprint(19999.99), [_offer("cb-1", "us-east-2a", 20000, 0)]
                                              ).offering is None


def test_the_earliest_affordable_offering_wins_not_the_latest():
    offers = [_offer("late", "us-east-2a", 1000, 5), _offer("early", "us-east-2b", 1500, 1),
              _offer("mid", "us-east-2a", 900, 3)]
    assert ec2_requests.choose_capacity_block(_block_blueprint(2000), offers).offering["CapacityBlockOfferingId"] \
        == "early"


def test_an_offering_outside_the_blueprints_zones_is_never_chosen():
    offers = [_offer("elsewhere", "us-west-2a", 100, 0), _offer("ours", "us-east-2c", 1500, 4)]
    assert ec2_requests.choose_capacity_block(_block_blueprint(2000), offers).offering["CapacityBlockOfferingId"] \
        == "ours"
    nothing = ec2_requests.choose_capacity_block(_block_blueprint(2000), offers[:1])
    assert nothing.offering is None and "no Capacity Block offering in us-east-2a" in nothing.reason


def test_buying_a_capacity_block_needs_an_explicit_yes():
    with pytest.raises(ConfigError, match="approve_capacity_block_purchase"):
        check_capacity_block_approval(_block_blueprint(20000), approved=False)
    check_capacity_block_approval(_block_blueprint(20000), approved=True)
    check_capacity_block_approval(REFERENCE, approved=False)  # an ODCR needs no approval


# --- planning numbers --------------------------------------------------------------------------


def _gqa(kv_heads: int = 8):
    return REFERENCE.model.model_copy(update={
        "dtype": "bf16", "attention": GqaAttention(kind="gqa", layers=80, kv_heads=kv_heads, head_dim=128)})


def test_gqa_kv_is_split_over_tp_only_as_far_as_there_are_kv_heads():
    model = _gqa(8)
    assert capacity_math.kv_split(model, 4) == 4
    assert capacity_math.kv_split(model, 8) == 8
    assert capacity_math.kv_split(model, 16) == 8  # beyond the heads, KV is replicated, not split
    assert capacity_math.kv_split(REFERENCE.model, 8) == 1  # MLA: every rank holds the latent


def test_prefill_kv_per_gpu_is_divided_by_the_pipeline_stages():
    model = _gqa(8)
    one = capacity_math.prefill_memory(model, "auto", tp=8, pp=1, gpu_gb=141, utilization=0.9)
    two = capacity_math.prefill_memory(model, "auto", tp=8, pp=2, gpu_gb=141, utilization=0.9)
    per_token = capacity_math.kv_bytes_per_token(model, "auto")
    assert one.kv_bytes_per_token_per_gpu == pytest.approx(per_token / 8)
    assert two.kv_bytes_per_token_per_gpu == pytest.approx(per_token / 8 / 2)


def test_a_role_fits_only_with_kv_memory_left_over():
    role = capacity_math.prefill_memory(REFERENCE.model, "fp8", tp=8, pp=2, gpu_gb=141, utilization=0.9)
    assert role.fits
    assert not replace(role, kv_free_gb_per_gpu=0.0).fits
    assert replace(role, kv_free_gb_per_gpu=0.01).fits
    assert not replace(role, kv_free_gb_per_gpu=-0.5).fits


# --- blueprint rules -----------------------------------------------------------------------------


GQA_MODEL = ("    kind: mla\n    layers: 78\n    kv_lora_rank: 512\n    qk_rope_head_dim: 64\n    indexer_head_dim: 128\n",
             "    kind: gqa\n    layers: 80\n    kv_heads: 8\n    head_dim: 128\n")


def _edit(*pairs: tuple[str, str]) -> str:
    text = REFERENCE_TEXT
    for old, new in pairs:
        assert old in text, old
        text = text.replace(old, new)
    return text


def _problems(text: str) -> dict[str, str]:
    try:
        parse_blueprint(text, "bp.yaml")
    except BlueprintError as e:
        return {p.field: p.message for p in e.problems}
    return {}


def test_gqa_decode_tp_equal_to_prefill_tp_is_accepted():
    equal = _edit(GQA_MODEL, ("decode: {nodes: 2, dp: 16, ep: 16, tp: 1}", "decode: {nodes: 2, dp: 2, ep: 16, tp: 8}"))
    assert "topology.decode.tp" not in _problems(equal)


def test_a_scenario_whose_output_overflows_the_context_is_refused():
    room = REFERENCE.model.max_context - 100
    found = _problems(_edit(("input_tokens: 120000, output_tokens: 512", f"input_tokens: {room}, output_tokens: 512")))
    assert "exceed the model's context" in found["benchmark.scenarios[2].input_tokens"]
    fits = _problems(_edit(("input_tokens: 120000, output_tokens: 512", f"input_tokens: {room}, output_tokens: 100")))
    assert "benchmark.scenarios[2].input_tokens" not in fits


def test_expert_parallel_beyond_the_decode_ranks_is_refused():
    found = _problems(_edit(("decode: {nodes: 2, dp: 16, ep: 16, tp: 1}", "decode: {nodes: 2, dp: 8, ep: 16, tp: 1}")))
    assert "ep 16 exceeds the decode ranks (dp x tp = 8)" in found["topology.decode.ep"]


# --- staging manifests and goodput ----------------------------------------------------------------


def _listed(key: str, sha_b64: str | None = None, checksum_type: str | None = "FULL_OBJECT") -> ListedObject:
    return ListedObject(key, 10, '"etag-1"', None, sha_b64, None, checksum_type)


def test_a_composite_multipart_checksum_is_not_a_full_object_checksum():
    # "...-3": a checksum of the part checksums (multipart), which no downloaded file can match
    with pytest.raises(ConfigError, match="no full-object checksum"):
        build_manifest("b", "m/", [_listed("m/a.safetensors", "cGFydHM=-3", None)], None)


def test_s3s_own_sha256_wins_over_a_hash_file_record():
    s3_sha = "q80/GnGt2kQcJ2ZLhT2DvtA4A6P6GO2Av5RRZZcKUJU="  # base64 of a SHA-256
    record_sha = "0" * 64
    hash_file = {"objects": {"m/a.safetensors": {"size": 10, "etag": '"etag-1"', "sha256": record_sha}}}
    (entry,) = build_manifest("b", "m/", [_listed("m/a.safetensors", s3_sha)], hash_file).entries
    assert entry.checksum_source == "s3" and entry.sha256 != record_sha


def test_a_request_exactly_at_the_slo_meets_it_for_goodput():
    at = [record(0.125, 0.0, 2, send_ts=float(i)) for i in range(4)]   # TTFT exactly 125 ms
    over = [record(0.126, 0.0, 2, send_ts=float(i)) for i in range(4)]
    assert summarize(at, 1.0, SloSpec(ttft_ms=125)).goodput == 4.0
    assert summarize(over, 1.0, SloSpec(ttft_ms=125)).goodput == 0.0
