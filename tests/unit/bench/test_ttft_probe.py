"""TTFT probes: a tiny completion, judged on TTFT only, and only once the KV transfers are shown."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml
from pydantic import ValidationError

from blueprints.schema import GateRule, PairedGateSpec, Scenario, SloSpec
from tasks.errors import BlueprintError
from tasks.parsing.prometheus import Sample
from tasks.planning.bench_baseline import baseline_from_summaries
from tasks.planning.bench_judge import Verdict
from tasks.planning.gate import evaluate_gate
from tasks.planning.gate_paired import Levels
from tasks.planning.gate_paired_report import PointHealth, verdict
from tasks.planning.gate_sequential import critical_family
from tasks.planning.gate_suggest import suggest_gate
from tasks.planning.paired_windows import checks
from tasks.planning.server_figures import TRANSFERS, ServerFigures, Snapshot, TransferCounter, figures, pool
from tasks.planning.ttft_probe import Probes, transfer_blocker
from tests.unit.bench.helpers import gate_spec, run
from tests.unit.bench.test_paired_benchmark import SANDBOX, _windows, load_blueprint_doc

PROBES = Probes({"isl-3k": 2}, TransferCounter("decode", "vllm:nixl_xfer_time_seconds"))
NO_TRANSFER = "TTFT probe: no KV transfer seen in vllm:nixl_xfer_time_seconds_count during the point"


# --- the schema and validate -----------------------------------------------------------------------

def _scenario(**more) -> dict:
    return {"name": "probe", "input_tokens": 3000, "output_tokens": 2, "concurrencies": [8], "duration_s": 60,
            "ttft_probe": True, **more}


def test_a_probe_asks_for_2_to_16_tokens_and_1_is_refused_with_the_reason():
    assert Scenario(**_scenario()).ttft_probe and Scenario(**_scenario(output_tokens=16)).output_tokens == 16
    with pytest.raises(ValidationError, match=r"output_tokens: a TTFT probe needs at least 2 output tokens, got 1: "
                                              r"with PD disaggregation a 1-token request may be answered by the "
                                              r"prefill engine alone.*set output_tokens: 2"):
        Scenario(**_scenario(output_tokens=1))
    with pytest.raises(ValidationError, match=r"output_tokens: a TTFT probe asks for at most 16 output tokens, got 17"):
        Scenario(**_scenario(output_tokens=17))
    assert Scenario(**_scenario(output_tokens=1, ttft_probe=False)).output_tokens == 1   # not a probe: any length


def _doc(connector: str = "nixl", server_metrics: bool = True, nixl_mode: str = "pull", **paired) -> dict:
    doc = yaml.safe_load(SANDBOX.read_text())
    doc["kv_transfer"]["connector"] = connector
    doc["kv_transfer"]["nixl_mode"] = nixl_mode
    if nixl_mode == "pull":       # pull NixlConnector rejects prefill pp > 1 (rules._engine_rules)
        doc["topology"]["prefill"] = {"nodes": 1, "tp": 8, "pp": 1}
    doc["baseline"]["scenarios"] = {}
    doc["benchmark"] = {"repeats": 1, "server_metrics": {"enabled": server_metrics}, "scenarios": [
        {"name": "full", "input_tokens": 100, "output_tokens": 8, "concurrencies": [4], "duration_s": 12},
        {"name": "probe", "input_tokens": 100, "output_tokens": 2, "concurrencies": [4, 8], "duration_s": 12,
         "ttft_probe": True}]}
    if paired:
        doc["gate"]["paired"] = paired
    return doc


def test_validate_accepts_a_probe_on_a_stack_whose_transfers_are_counted():
    bp = load_blueprint_doc(_doc())
    assert Probes.of(bp).scenarios == {"probe": 2} and Probes.of(bp).counter.count_name == \
        "vllm:nixl_xfer_time_seconds_count"


def test_validate_refuses_a_probe_without_server_metrics():
    with pytest.raises(BlueprintError, match=r"benchmark\.scenarios\[1\]\.ttft_probe: TTFT probe probe: needs the "
                                             r"engines' transfer metrics.*benchmark\.server_metrics is off"):
        load_blueprint_doc(_doc(server_metrics=False))


def test_validate_refuses_a_probe_on_vllm_with_mooncake_which_counts_no_transfers():
    with pytest.raises(BlueprintError, match=r"MooncakeConnector exports no transfer metrics.*connector: nixl"):
        load_blueprint_doc(_doc(connector="mooncake"))


def test_validate_refuses_a_probe_on_vllm_nixl_push_whose_transfer_count_is_not_documented():
    with pytest.raises(BlueprintError, match=r"nixl_mode push, where vLLM counts its KV transfers is not documented"
                                             r".*nixl_mode: pull"):
        load_blueprint_doc(_doc(nixl_mode="push"))


def test_validate_refuses_a_tpot_weight_on_a_probe_point_and_needs_none_there():
    weights = {"ttft": {"full@4": 1.0, "probe@4": 1.0, "probe@8": 1.0}, "tpot": {"full@4": 1.0, "probe@8": 2.0}}
    with pytest.raises(BlueprintError, match=r"gate\.paired\.weights\.tpot\.probe@8: probe@8 is a TTFT probe: its "
                                             r"tpot is not gated"):
        load_blueprint_doc(_doc(weights=weights))
    load_blueprint_doc(_doc(weights={**weights, "tpot": {"full@4": 1.0}}))   # the probe's points left out: valid


def test_validate_refuses_a_tpot_contract_when_every_point_is_a_probe():
    doc = _doc(contracts={"ttft": 1.05, "tpot": 1.05})
    doc["benchmark"]["scenarios"] = doc["benchmark"]["scenarios"][1:]
    with pytest.raises(BlueprintError, match=r"gate\.paired\.contracts\.tpot: every point is a TTFT probe"):
        load_blueprint_doc(doc)


# --- the paired gate ---------------------------------------------------------------------------------

def test_the_paired_contracts_pool_probe_points_for_ttft_only():
    bp = load_blueprint_doc(_doc())
    made = {c.name: c for c in checks(PairedGateSpec(guard=1.2), bp.benchmark)}
    assert set(made["ttft"].weights) == {("full", 4), ("probe", 4), ("probe", 8)}
    assert set(made["tpot"].weights) == {("full", 4)}
    assert set(made) == {"ttft", "tpot", "ttft @ full", "ttft @ probe"}   # one TPOT scenario: no TPOT guard


def test_the_suggested_tpot_weights_leave_the_probe_points_out():
    doc = yaml.safe_load(SANDBOX.with_name("glm51-fp8-2p2d.yaml").read_text())
    doc["kv_transfer"]["connector"] = "nixl"
    doc["kv_transfer"]["nixl_mode"] = "pull"
    doc["topology"]["prefill"] = {**doc["topology"]["prefill"], "pp": 1}
    doc["benchmark"]["scenarios"][0] = {**doc["benchmark"]["scenarios"][0], "ttft_probe": True, "output_tokens": 2}
    doc["gate"]["paired"].pop("weights")     # its own name the probe's points for TPOT: refused
    weights = suggest_gate(load_blueprint_doc(doc)).spec.weights
    probe = doc["benchmark"]["scenarios"][0]["name"] + "@"
    assert any(k.startswith(probe) for k in weights["ttft"]) and weights["tpot"]
    assert not any(k.startswith(probe) for k in weights["tpot"])


def _probe_verdict(transfers: float | None, completed: int = 100):
    bp = load_blueprint_doc(_doc(contracts={"ttft": 1.10}, guard=None))
    made = checks(bp.gate.paired, bp.benchmark)
    point = ("probe", 4)
    windows = {"ttft": {p: w for p in (("full", 4), point, ("probe", 8))
                        for w in _windows(1.0, 12, 0.01)["tpot"].values()}}
    summaries = []
    for scenario, c in (("full", 4), point, ("probe", 8)):
        s = run(completed, seed=c, scenario=scenario, concurrency=c, tokens=2)
        count = completed if scenario == "full" or (scenario, c) != point else transfers
        summaries.append(s if count is None else replace(s, server={TRANSFERS: (float(count), 1.0)}))
    health = {(s.scenario, s.concurrency): PointHealth(completed, 0) for s in summaries}
    levels = Levels.of(0.05, 3, 2.0, len(made))
    return verdict(made, windows, health, levels, 1, bp.gate, summaries=summaries, probes=Probes.of(bp))


def test_a_paired_probe_point_counts_only_once_its_transfers_are_shown():
    outcome, report, _ = _probe_verdict(transfers=100)             # as many transfers as completed requests
    assert outcome is Verdict.PASS
    [row] = [r for r in report.rows if r.check == "transfer" and r.concurrency == 4]
    assert row.verdict is Verdict.PASS and "100 KV transfers" in row.reason
    outcome, report, result = _probe_verdict(transfers=99)        # one short: not judged
    assert outcome is None and report.outcome is Verdict.INCONCLUSIVE
    assert any(r.startswith(f"probe @ concurrency 4: {NO_TRANSFER} (max_tokens 2") for r in report.reasons)
    assert result.results[0].estimate is None                       # its windows left out of the contract


# --- the unpaired gate -------------------------------------------------------------------------------

TPOT_GATE = gate_spec(GateRule(metric="ttft_mean", max_ratio=1.10, critical=True),
                      GateRule(metric="tpot_mean", max_ratio=1.10, critical=True),
                      GateRule(metric="output_tokens_per_s", min_ratio=0.9),
                      slo=SloSpec(ttft_ms=1000, tpot_ms=15), min_samples=5)


def _tpot_twice_as_slow(transfers: float | None = 400):
    base = run(400, seed=1, tpot_ms=10.0, tokens=2)
    cand = run(400, seed=2, tpot_ms=20.0, tokens=2)
    baseline = baseline_from_summaries([base], source="recorded")
    if transfers is not None:
        cand = replace(cand, server={TRANSFERS: (float(transfers), 1.0)})
    return cand, baseline


def test_a_probe_point_twice_as_slow_on_tpot_passes_on_ttft_and_the_same_point_not_a_probe_fails():
    cand, baseline = _tpot_twice_as_slow()
    assert evaluate_gate([cand], baseline, TPOT_GATE).outcome is Verdict.FAIL
    report = evaluate_gate([cand], baseline, TPOT_GATE, probes=PROBES)
    assert report.outcome is Verdict.PASS, report.reasons
    shown = {r.metric: r for r in report.rows if not r.gated}
    assert shown["tpot_mean"].reason == "TTFT probe: tpot_mean not gated" and shown["tpot_mean"].verdict is None
    assert shown["output_tokens_per_s"].reason == "TTFT probe: output_tokens_per_s not gated"
    judged = {(r.check, r.metric): r.verdict for r in report.rows if r.gated}
    assert judged[("ratio", "ttft_mean")] is Verdict.PASS and judged[("slo", "ttft_mean")] is Verdict.PASS
    assert judged[("transfer", "kv_transfers")] is Verdict.PASS and ("slo", "tpot_mean") not in judged


@pytest.mark.parametrize("transfers, judged", [(400, True), (399, False), (0, False), (None, False)])
def test_a_probe_point_is_judged_only_with_at_least_one_transfer_per_completed_request(transfers, judged):
    cand, baseline = _tpot_twice_as_slow(transfers)
    report = evaluate_gate([cand], baseline, TPOT_GATE, probes=PROBES)
    assert (report.outcome is Verdict.PASS) is judged
    if not judged:
        assert report.outcome is Verdict.INCONCLUSIVE
        ttft = next(r for r in report.rows if r.check == "ratio" and r.metric == "ttft_mean")
        assert ttft.verdict is Verdict.INCONCLUSIVE and "TTFT probe: no KV transfer" in ttft.reason
        errors = next(r for r in report.rows if r.check == "errors")
        assert errors.verdict is Verdict.PASS                # errors are facts: still judged


def test_an_unseen_transfer_names_the_metric_and_the_completion_length():
    cand, _ = _tpot_twice_as_slow(transfers=0)
    assert transfer_blocker(cand, PROBES) == (f"{NO_TRANSFER} (max_tokens 2 may be answered by prefill alone): "
                                              "0 transfers for 400 completed requests")
    missing = replace(cand, server={}, server_notes=("kv_transfers: no vllm:nixl_xfer_time_seconds_count on the "
                                                     "decode engines",))
    assert "no KV transfer count for the point" in transfer_blocker(missing, PROBES)


def test_the_sequential_family_counts_a_probe_points_ttft_checks_only():
    bp = load_blueprint_doc(_doc())
    gate = TPOT_GATE
    # full@4: ttft + tpot SLOs; probe@4, probe@8: the ttft SLO only (no baseline: no ratio checks)
    assert critical_family(bp.benchmark, gate, None) == 2 + 1 + 1


# --- the transfer count ------------------------------------------------------------------------------

def _hist(name: str, count: float, **labels: str) -> tuple[Sample, ...]:
    return (Sample(name + "_sum", labels, count * 0.01), Sample(name + "_count", labels, count))


def test_the_transfer_count_is_the_histograms_count_during_the_point_and_repeats_add_up():
    before = Snapshot({"decode": _hist("vllm:nixl_xfer_time_seconds", 10)})
    after = Snapshot({"decode": _hist("vllm:nixl_xfer_time_seconds", 70)})
    figs = figures("vllm", "nixl", [], before, [], after)
    assert figs.values[TRANSFERS] == (60.0, 1.0)
    assert pool([figs, figs]).values[TRANSFERS] == (120.0, 2.0)
    stage = {"stage": "prefill_transfer_kv_cache"}
    sglang = figures("sglang", "mooncake", [],
                     Snapshot({"prefill": _hist("sglang:per_stage_req_latency_seconds", 3, **stage)}),
                     [], Snapshot({"prefill": _hist("sglang:per_stage_req_latency_seconds", 3, **stage)}))
    assert sglang.values[TRANSFERS] == (0.0, 1.0)                   # none during the point is a reading: 0
    mooncake = figures("vllm", "mooncake", [], before, [], after)
    assert TRANSFERS not in mooncake.values


# --- the paired benchmark stage ----------------------------------------------------------------------

class Around:
    """The engines read around a round: ``per_request`` transfers for each candidate request."""

    def __init__(self, per_request: float):
        self.per_request, self.rounds = per_request, 0

    def __call__(self, point):
        mine, other = point()
        self.rounds += 1
        return (mine, other), ServerFigures({TRANSFERS: (self.per_request * len(mine.records), 1.0)})


@pytest.mark.parametrize("per_request, outcome", [(1.0, Verdict.PASS), (0.0, Verdict.INCONCLUSIVE)])
def test_the_paired_benchmark_reads_the_engines_around_probe_rounds_and_judges_them_by_it(tmp_path, per_request,
                                                                                          outcome):
    from tasks.stages.benchmark import read_results
    from tasks.stages.benchmark_paired import judge, read_paired, run_paired_benchmark
    from tests.unit.bench.test_paired_benchmark import DrawnPair

    doc = _doc(window_s=1.0, looks=3, contracts={"ttft": 1.1, "tpot": 1.1}, guard=None)
    doc["benchmark"]["scenarios"] = [{**s, "duration_s": 30.0} for s in doc["benchmark"]["scenarios"]]
    bp, around = load_blueprint_doc(doc), Around(per_request)
    measured = run_paired_benchmark(bp, "http://127.0.0.1:1", "http://127.0.0.1:2", tmp_path, "r1", DrawnPair(),
                                    "live", server=around)
    assert around.rounds == 2 * measured.stops[0].rounds                # probe@4 and probe@8, not full@4
    report, _ = judge(bp, read_paired(measured.results_path), measured.stops, read_results(measured.results_path))
    assert report.outcome is outcome, report.reasons
    transfers = [r for r in report.rows if r.check == "transfer"]
    assert len(transfers) == 2 and all((r.verdict is Verdict.PASS) is (per_request == 1.0) for r in transfers)
