"""The paired gate in the product: windows cut from both colours' records, the checks a blueprint
makes, the verdict at a look (error ceiling and saturated clients included), and the paired
benchmark's rounds and early stop with a load pair that draws both colours' requests."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from blueprints.loader import load_blueprint
from blueprints.schema import BaselineEndpoint, GateSpec, PairedGateSpec
from tasks.adapters.loadgen import LoadResult, LoadSpec
from tasks.errors import BlueprintError
from tasks.planning.bench_judge import Verdict
from tasks.planning.gate_paired import Levels, WindowSums
from tasks.planning.gate_paired_report import PointHealth, verdict
from tasks.planning.paired_windows import REQUEST_TIMES, Span, checks, split
from tasks.stages.benchmark_paired import PairedState, judge, read_paired, run_paired_benchmark
from tests.unit.bench.helpers import record

SANDBOX = Path(__file__).resolve().parents[3] / "blueprints" / "sandbox-2p2d.yaml"


def _req(send: float, ttft: float = 0.1, tpot: float = 0.01, tokens: int = 4, error: str | None = None):
    return record(ttft, tpot, tokens, send_ts=send, error=error)


# --- windows -------------------------------------------------------------------------------------

def test_the_common_span_is_split_into_equal_windows_by_send_time_and_nothing_outside_it_counts():
    # candidate measured 10..20, baseline 11..21: the common span is 11..20, three 3 s windows.
    cand = [_req(t) for t in (10.5, 11.0, 13.9, 14.0, 19.99, 20.0)]
    base = [_req(t, ttft=0.2) for t in (11.0, 16.9, 17.0, 20.5)]
    cut = split(cand, Span(10.0, 10.0), base, Span(11.0, 10.0), asked_s=3.0)
    assert cut.span_s == pytest.approx(9.0) and cut.window_s == pytest.approx(3.0)
    ttft = cut.windows["ttft"]
    assert [w.candidate_n for w in ttft] == [2, 1, 1]       # 10.5 before the span, 20.0 at its end: out
    assert [w.baseline_n for w in ttft] == [1, 1, 1]        # 16.9 in window 2 (14..17), 17.0 in window 3
    assert ttft[0].candidate_sum == pytest.approx(0.2) and ttft[0].baseline_sum == pytest.approx(0.2)


def test_a_window_is_widened_to_three_request_times():
    slow = [_req(t, ttft=1.0, tpot=0.25, tokens=5) for t in range(0, 60, 2)]  # e2e 2 s
    cut = split(slow, Span(0.0, 60.0), slow, Span(0.0, 60.0), asked_s=1.0)
    assert cut.window_s >= REQUEST_TIMES * 2.0 - 1e-9 and len(cut.windows["ttft"]) == int(60 // (REQUEST_TIMES * 2.0))
    assert len(split(slow, Span(0.0, 60.0), slow, Span(0.0, 60.0), asked_s=20.0).windows["ttft"]) == 3


def test_failed_requests_and_spans_that_do_not_overlap_give_no_values():
    cand = [_req(1.0), _req(2.0, error="HTTP 500")]
    assert sum(w.candidate_n for w in split(cand, Span(0.0, 4.0), cand, Span(0.0, 4.0), 1.0).windows["ttft"]) == 1
    apart = split(cand, Span(0.0, 4.0), cand, Span(5.0, 4.0), 1.0)
    assert apart.windows["ttft"] == () and apart.windows["tpot"] == ()
    assert split(cand, None, cand, Span(0.0, 4.0), 1.0).windows["tpot"] == ()


# --- checks and schema ---------------------------------------------------------------------------

def _benchmark(points: dict[str, list[int]], duration_s: float = 12.0):
    doc = yaml.safe_load(SANDBOX.read_text())
    doc["baseline"]["scenarios"] = {}
    doc["benchmark"] = {"repeats": 1, "scenarios": [
        {"name": n, "input_tokens": 100, "output_tokens": 4, "concurrencies": cs, "duration_s": duration_s}
        for n, cs in points.items()]}
    return doc


def test_contracts_pool_every_point_at_their_weights_and_guards_watch_each_scenario():
    bp = load_blueprint_doc(_benchmark({"a": [4, 8], "b": [2]}))
    spec = PairedGateSpec(contracts={"ttft": 1.05, "tpot": 1.07}, guard=1.2, weights={"ttft": {"a@4": 3.0}})
    made = {c.name: c for c in checks(spec, bp.benchmark)}
    assert set(made) == {"ttft", "tpot", "ttft @ a", "ttft @ b", "tpot @ a", "tpot @ b"}
    assert made["ttft"].weights == {("a", 4): 3.0, ("a", 8): 1.0, ("b", 2): 1.0} and made["tpot"].margin == 1.07
    assert made["ttft @ a"].margin == 1.2 and set(made["ttft @ a"].weights) == {("a", 4), ("a", 8)}
    assert {c.name for c in checks(PairedGateSpec(guard=None), bp.benchmark)} == {"ttft", "tpot"}
    single = load_blueprint_doc(_benchmark({"a": [4, 8]}))
    assert {c.kind for c in checks(PairedGateSpec(), single.benchmark)} == {"contract"}


def load_blueprint_doc(doc: dict, tmp: Path | None = None):
    import tempfile
    path = Path(tempfile.mkdtemp()) / "bp.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return load_blueprint(path)


def test_an_endpoint_key_lives_in_an_environment_variable_whose_name_pdlift_redacts():
    assert BaselineEndpoint(url="https://old.internal:8000", api_key_env="OLD_LLM_API_KEY").api_key_env
    for name in ("OLD_LLM_KEY", "lower case", "1_API_KEY"):
        with pytest.raises(ValidationError):
            BaselineEndpoint(url="https://old.internal:8000", api_key_env=name)
    with pytest.raises(ValidationError):
        BaselineEndpoint(url="https://user:pw@old.internal:8000")   # credentials never in the URL
    doc = _benchmark({"a": [4]})
    doc["gate"]["paired"] = {"weights": {"ttft": {"a@16": 2.0}}}
    with pytest.raises(BlueprintError, match=r"gate\.paired\.weights\.ttft\.a@16: no benchmark point 'a@16'"):
        load_blueprint_doc(doc)


# --- the verdict at a look -----------------------------------------------------------------------

GATE = GateSpec(rules=[{"metric": "tpot_mean", "max_ratio": 1.1, "critical": True}], max_error_rate=0.02)
SPEC = PairedGateSpec(contracts={"tpot": 1.10}, guard=None, looks=3)
POINT = ("a", 4)


def _windows(ratio: float, n: int, spread: float, seed: int = 1) -> dict:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        b = 10.0 * rng.lognormvariate(0, spread)
        rows.append(WindowSums(b * ratio * rng.lognormvariate(0, spread), 10, b * 10 / 10, 10))
    return {"tpot": {POINT: tuple(rows)}}


def _verdict(windows, k, health=None):
    bp_checks = (checks(SPEC, load_blueprint_doc(_benchmark({"a": [4]})).benchmark))
    levels = Levels.of(0.05, SPEC.looks, SPEC.spending, len(bp_checks))
    return verdict(bp_checks, windows, health or {POINT: PointHealth(100, 0)}, levels, k, GATE)


def test_undecided_before_the_last_look_goes_on_and_at_it_is_inconclusive_with_the_reason():
    wide = _windows(1.0, 6, 0.3)
    outcome, report, _ = _verdict(wide, 1)
    assert outcome is None and report.outcome is Verdict.INCONCLUSIVE
    outcome, report, _ = _verdict(wide, 3)
    assert outcome is Verdict.INCONCLUSIVE and "undecided at the last look (3 of 3)" in report.reasons[-1]


def test_an_equal_candidate_passes_and_a_clearly_slower_one_fails_at_the_first_look():
    outcome, report, result = _verdict(_windows(1.0, 12, 0.01), 1)
    assert outcome is Verdict.PASS and result.results[0].upper <= 1.10
    row = next(r for r in report.rows if r.check == "paired contract")
    assert row.metric == "tpot_mean" and row.ci == (result.results[0].lower, result.results[0].upper)
    outcome, report, _ = _verdict(_windows(1.3, 12, 0.01), 1)
    assert outcome is Verdict.FAIL and "significantly worse than 1.1" in report.reasons[0]


def test_the_error_ceiling_fails_above_it_and_passes_at_it():
    tight = _windows(1.0, 12, 0.01)
    assert _verdict(tight, 1, {POINT: PointHealth(100, 2)})[0] is Verdict.PASS     # 2% == ceiling
    outcome, report, _ = _verdict(tight, 1, {POINT: PointHealth(100, 3)})
    assert outcome is Verdict.FAIL and "3 of 100 requests failed, above the ceiling" in report.reasons[0]


def test_a_failing_baseline_leaves_nothing_compared_so_the_gate_cannot_pass():
    tight = _windows(1.0, 12, 0.01)
    assert _verdict(tight, 1, {POINT: PointHealth(100, 0, None, 100, 2)})[0] is Verdict.PASS   # at the ceiling
    outcome, report, _ = _verdict(tight, 3, {POINT: PointHealth(100, 0, None, 100, 3)})
    assert outcome is Verdict.INCONCLUSIVE and any("the baseline failed 3 of 100 requests" in r for r in report.reasons)


def test_a_saturated_client_never_passes():
    tight = _windows(1.0, 12, 0.01)
    assert _verdict(tight, 1, {POINT: PointHealth(100, 0, "client CPU at 95%")})[0] is None
    outcome, report, _ = _verdict(tight, 3, {POINT: PointHealth(100, 0, "client CPU at 95%")})
    assert outcome is Verdict.INCONCLUSIVE and any("saturated" in r for r in report.reasons)


# --- the paired benchmark with a drawn load pair -------------------------------------------------

class DrawnPair:
    """Both colours' requests drawn with a drift common to both per second (what pairing cancels)
    and the candidate's TPOT scaled; returns what ``loadgen.run_pair`` returns."""

    def __init__(self, tpot_scale: float = 1.0, seed: int = 3):
        self.tpot_scale, self.rng, self.calls = tpot_scale, random.Random(seed), []

    def _result(self, spec: LoadSpec, records) -> LoadResult:
        return LoadResult(spec, "m", tuple(records), 4, spec.duration_s, 0.1, 0.1, 0.0, 0.0, 0.0, False, None, True,
                          "exact", 0, None)

    def __call__(self, ours: LoadSpec, theirs: LoadSpec):
        assert (ours.salt, ours.seed) == (theirs.salt, theirs.seed) and ours.base_url != theirs.base_url
        self.calls.append((ours, theirs))
        start = 1000.0 * len(self.calls)
        mine, other = [], []
        for i in range(int(ours.duration_s * 10)):
            t = start + i / 10
            drift = 1.0 + 0.3 * ((int(t) % 7) / 7)     # both colours slower together, every second differently
            for out, scale in ((mine, self.tpot_scale), (other, 1.0)):
                out.append(record(0.1 * drift * self.rng.lognormvariate(0, 0.05),
                                  0.01 * drift * scale * self.rng.lognormvariate(0, 0.05), 4, send_ts=t,
                                  scenario=ours.scenario, concurrency=ours.concurrency, repeat=ours.repeat))
        return self._result(ours, mine), self._result(theirs, other)


def _paired_blueprint(tmp_path: Path, **paired):
    doc = _benchmark({"a": [4]}, duration_s=30.0)
    doc["gate"]["paired"] = {"window_s": 1.0, "looks": 3, "contracts": {"ttft": 1.1, "tpot": 1.1}, **paired}
    return load_blueprint_doc(doc)


def test_an_equal_candidate_passes_at_the_first_look_in_spite_of_drift_and_both_colours_are_kept(tmp_path):
    bp, pair = _paired_blueprint(tmp_path), DrawnPair()
    measured = run_paired_benchmark(bp, "http://127.0.0.1:1", "http://127.0.0.1:2", tmp_path, "r1", pair, "live blue")
    [stop] = measured.stops
    assert stop.rounds == 1 and stop.reason == "decided" and "PASSed at look 1" in stop.note
    assert len(pair.calls) == 1 and pair.calls[0][0].duration_s == pytest.approx(10.0)
    raw = sorted(p.name for p in (tmp_path / "raw").iterdir())
    assert raw == ["a-c4-r0-baseline.json", "a-c4-r0.json"]
    state = read_paired(measured.results_path)
    assert state.look == 1 and len(state.windows["tpot"][("a", 4)]) == 10
    report, words = judge(bp, state, measured.stops)
    assert report.outcome is Verdict.PASS and "## Paired windows" in words[0]
    assert any(line.startswith("Stopped at look 1 of 3: every check PASSed") for line in words)
    assert json.loads((tmp_path / "baseline-results.json").read_text())["summaries"]


def test_a_candidate_30_percent_slower_on_tpot_fails_at_the_first_look(tmp_path):
    bp, pair = _paired_blueprint(tmp_path), DrawnPair(tpot_scale=1.3)
    measured = run_paired_benchmark(bp, "http://127.0.0.1:1", "http://127.0.0.1:2", tmp_path, "r1", pair, "live")
    report, _ = judge(bp, read_paired(measured.results_path), measured.stops)
    assert report.outcome is Verdict.FAIL and measured.stops[0].rounds == 1 and len(pair.calls) == 1
    assert any(r.metric == "tpot_mean" and r.verdict is Verdict.FAIL for r in report.rows)


def test_a_candidate_at_the_margin_runs_every_look_and_ends_undecided(tmp_path):
    bp, pair = _paired_blueprint(tmp_path), DrawnPair(tpot_scale=1.1)
    measured = run_paired_benchmark(bp, "http://127.0.0.1:1", "http://127.0.0.1:2", tmp_path, "r1", pair, "live")
    state = read_paired(measured.results_path)
    assert len(pair.calls) == 3 and state.look == 3 and measured.stops[0].reason == "cap"
    assert judge(bp, state, measured.stops)[0].outcome is Verdict.INCONCLUSIVE
    assert PairedState.from_dict(state.to_dict()) == state


def test_a_candidate_as_slow_as_the_live_colour_is_still_held_to_the_slo(tmp_path):
    doc = _benchmark({"a": [4]}, duration_s=30.0)
    doc["gate"]["paired"] = {"window_s": 1.0, "looks": 3, "contracts": {"ttft": 1.1, "tpot": 1.1}}
    doc["gate"]["slo"] = {"ttft_ms": 50}                 # both colours take about 100 ms to the first token
    bp = load_blueprint_doc(doc)
    measured = run_paired_benchmark(bp, "http://127.0.0.1:1", "http://127.0.0.1:2", tmp_path, "r1", DrawnPair(), "x")
    from tasks.stages.benchmark import read_results

    report, _ = judge(bp, read_paired(measured.results_path), measured.stops, read_results(measured.results_path))
    assert report.outcome is Verdict.FAIL and measured.stops[0].rounds == 1
    assert any(r.check == "slo" and r.verdict is Verdict.FAIL for r in report.rows)
    assert all(r.verdict is Verdict.PASS for r in report.rows if r.check.startswith("paired"))   # equal colours


@pytest.mark.parametrize("change, field, says", [
    (lambda d: d["gate"]["paired"].update(weights={"ttft": {"a@4": 1.0}}), "gate.paired.weights.ttft",
     "weights name some points but not a@8"),
    (lambda d: d["gate"]["paired"].update(contracts={"ttft": 1.05}, weights={"tpot": {"a@4": 1.0, "a@8": 1.0}}),
     "gate.paired.weights.tpot", "weights for tpot, which has no contract"),
    (lambda d: d["benchmark"].update(mode="poisson"), "benchmark.mode", "one request stream"),
    (lambda d: d["benchmark"].update(budget_minutes=0.3), "benchmark.budget_minutes",
     "add up to 0.4 min of load, more than budget_minutes 0.3"),
])
def test_a_paired_gate_the_product_could_not_run_as_written_is_refused_naming_the_field(change, field, says):
    doc = _benchmark({"a": [4, 8]})
    doc["gate"]["paired"] = {"window_s": 1.0}
    load_blueprint_doc(doc)                              # as it is: fine
    change(doc)
    with pytest.raises(BlueprintError) as refused:
        load_blueprint_doc(doc)
    assert field in str(refused.value) and says in str(refused.value), str(refused.value)


def test_the_service_being_replaced_is_measured_only_until_the_first_promotion(tmp_path):
    from types import SimpleNamespace

    from tasks.benchmark import _promoted_before

    pulled = []
    wiring = SimpleNamespace(bp=SimpleNamespace(name="d"), state_root=tmp_path,
                             state=SimpleNamespace(pull=lambda key: pulled.append(key)))
    assert not _promoted_before(wiring) and pulled == ["baselines/d.json"]   # read from the shared store
    (tmp_path / "baselines").mkdir()
    (tmp_path / "baselines" / "d.json").write_text("{}")
    assert _promoted_before(wiring)
