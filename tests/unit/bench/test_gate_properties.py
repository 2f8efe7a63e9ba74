"""Property: a candidate identical to its baseline is never failed, whatever the rules and noise."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from blueprints.schema import GateRule, GateSpec, SloSpec
from tasks.planning.bench_baseline import baseline_from_summaries
from tasks.planning.gate import Verdict, evaluate_gate
from tasks.planning.metrics import summarize
from tests.unit.bench.helpers import record

METRICS = ["ttft_mean", "ttft_p50", "ttft_p99", "tpot_mean", "tpot_p90", "itl_mean", "e2e_mean", "e2e_p99"]


@st.composite
def identical_runs(draw):
    repeats = draw(st.integers(1, 3))
    per_repeat = draw(st.integers(5, 60))
    latency = st.floats(0.001, 2.0, allow_nan=False)
    records = [record(draw(latency), draw(latency) / 10, draw(st.integers(1, 6)), repeat=k, send_ts=float(i))
               for k in range(repeats) for i in range(per_repeat)]
    durations = {k: draw(st.floats(1.0, 100.0)) for k in range(repeats)}
    return summarize(records, durations, SloSpec())


@st.composite
def rules(draw):
    metric = draw(st.sampled_from(METRICS + ["output_tokens_per_s", "request_throughput", "goodput"]))
    latency = metric in METRICS
    ratio = draw(st.floats(1.0, 2.0)) if latency else draw(st.floats(0.5, 1.0))
    return GateRule(metric=metric, max_ratio=ratio if latency else None, min_ratio=None if latency else ratio,
                    critical=draw(st.booleans()), report_only=draw(st.booleans()))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(summary=identical_runs(), gate_rules=st.lists(rules(), min_size=1, max_size=4),
       min_samples=st.integers(1, 40), confidence=st.floats(0.8, 0.99), seed=st.integers(0, 2**16))
def test_a_candidate_identical_to_its_baseline_is_never_failed(summary, gate_rules, min_samples, confidence, seed):
    gate = GateSpec(rules=gate_rules, min_samples=min_samples, confidence=confidence)
    baseline = baseline_from_summaries([summary], source="itself")
    report = evaluate_gate([summary], baseline, gate, seed=seed, resamples=200)
    assert report.outcome is not Verdict.FAIL
    assert all(r.verdict is not Verdict.FAIL for r in report.rows)
