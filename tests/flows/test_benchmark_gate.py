"""The benchmark-gate flow end to end: the candidate (green) measured through its router in the
Kubernetes stand-in, judged against blue's recorded baseline, then promoted, rolled back, or
(an INCONCLUSIVE gate with gate.undecided: ask) paused for a person. Faults are injected into
green's engines only (tests/sandbox/bench/fixtures.py)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from pathlib import Path

import pytest

from tests.timing import timing
from tasks.adapters.engine_http import EngineHttp
from tasks.errors import BenchmarkBelowGate
from tasks.planning.bench_baseline import loads_baseline
from tasks.planning.manifests.common import COLOUR_LABEL

pytestmark = pytest.mark.usefixtures("prefect_harness")


@pytest.fixture(autouse=True)
def task_results(tmp_path):
    """Persisted task results (the benchmark and the gate are cached with them) in this test's dir."""
    from prefect.settings import PREFECT_LOCAL_STORAGE_PATH, temporary_settings

    with temporary_settings({PREFECT_LOCAL_STORAGE_PATH: tmp_path / "prefect-results"}):
        yield


def _flow(path: Path, run_id: str):
    from flows.benchmark import benchmark_flow

    return benchmark_flow(str(path), run_id, colour="green")


def _production_colour(stacks) -> str:
    bp = stacks.blueprint
    return stacks.kube.get("v1", "Service", bp.name, bp.name)["spec"]["selector"][COLOUR_LABEL]


def _snapshot(stacks) -> dict:
    """What rolling back must not touch: the production Service's version and blue's objects."""
    bp, k = stacks.blueprint, stacks.kube
    return {"production": k.get("v1", "Service", bp.name, bp.name)["metadata"]["resourceVersion"],
            "blue": [k.get(*ref)["metadata"]["uid"] for ref in (
                ("v1", "Namespace", f"{bp.name}-blue"), ("apps/v1", "Deployment", "router-blue", bp.name),
                ("v1", "Service", "router-blue", bp.name))]}


def _colour_is_gone(stacks, colour: str) -> bool:
    bp, k = stacks.blueprint, stacks.kube
    ns = k.get("v1", "Namespace", f"{bp.name}-{colour}")
    return (ns is None or bool(ns["metadata"].get("deletionTimestamp"))) and \
        k.get("apps/v1", "Deployment", f"router-{colour}", bp.name) is None


def _green_is_gone(stacks) -> bool:
    return _colour_is_gone(stacks, "green")


def _artifact(key: str):
    """The newest artifact with ``key`` (earlier tests and tries wrote the same key)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.client.schemas.sorting import ArtifactSort

    async def read():
        async with get_client() as client:
            return await client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])),
                                               sort=ArtifactSort.CREATED_DESC, limit=1)

    found = asyncio.run(read())
    return found[0] if found else None


def _gate_events(deployment: str, run_id: str) -> list[dict]:
    """The pdlift.gate.* events about this deployment's run ``run_id``, as automations would see them."""
    from prefect.client.orchestration import get_client

    async def read() -> list[dict]:
        async with get_client() as client:
            for _ in range(120):  # events reach the API asynchronously (the server writes them in batches)
                answer = await client._client.post("/events/filter", json={
                    "filter": {"event": {"prefix": ["pdlift.gate."]},
                               "resource": {"id": [f"pdlift.deployment.{deployment}"]}}, "limit": 50})
                mine = [e for e in answer.json().get("events") or [] if e["payload"].get("run_id") == run_id]
                if mine:
                    return mine
                await asyncio.sleep(0.25)
            return []

    return asyncio.run(read())


class Approver(threading.Thread):
    """Resumes the paused run of ``run_id`` with ``answer``, as a person in the UI would."""

    def __init__(self, run_id: str, answer: dict, timeout: float = 90.0):
        super().__init__(daemon=True)
        self.run_id, self.answer, self.timeout = run_id, answer, timeout
        self.paused_state: str | None = None

    def run(self) -> None:
        from prefect.client.orchestration import get_client
        from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterState, FlowRunFilterStateType
        from prefect.client.schemas.objects import StateType
        from prefect.flow_runs import resume_flow_run

        paused = FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.PAUSED])))
        deadline = time.monotonic() + self.timeout
        with get_client(sync_client=True) as client:
            while time.monotonic() < deadline:
                mine = [r for r in client.read_flow_runs(flow_run_filter=paused)
                        if r.parameters.get("run_id") == self.run_id]
                if mine:
                    self.paused_state = mine[0].state.name
                    resume_flow_run(mine[0].id, run_input=self.answer)
                    return
                time.sleep(0.5)


def _states(run_id: str) -> list[str]:
    """Every state (type) the benchmark-gate flow runs of ``run_id`` went through."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.sorting import FlowRunSort

    with get_client(sync_client=True) as client:
        newest = client.read_flow_runs(sort=FlowRunSort.EXPECTED_START_TIME_DESC, limit=50)
        runs = [r for r in newest if r.parameters.get("run_id") == run_id]
        assert runs, f"no flow run of {run_id}"
        return [state.type.value for r in runs for state in client.read_flow_run_states(r.id)]


@timing
def test_an_equal_candidate_passes_and_is_promoted(bench_env):
    stacks, bp, run_id = bench_env, bench_env.blueprint, "pass-" + uuid.uuid4().hex[:6]
    result = _flow(stacks.directory / "bp.yaml", run_id)
    assert result.gate.outcome == "PASS" and result.outcome == "promoted"
    assert _production_colour(stacks) == "green" and result.promotion.previous == "blue"
    # The promotion completed, so the colour it replaced is retired (keep_previous_colour_s: 0).
    assert result.retired.colour == "blue" and f"Namespace {bp.name}-blue" in result.retired.deleted
    assert _colour_is_gone(stacks, "blue")
    # Traffic flows: a request to the production Service's address is served by a green router.
    endpoint = next(e for e in stacks.routing.endpoints(bp.name, bp.name) if e.ready)
    assert stacks.routing.pod_labels(bp.name, endpoint.pod)[COLOUR_LABEL] == "green"
    with EngineHttp() as http:
        assert http.stream_completion(endpoint.url + "/v1/completions", bp.model.name, "hello", 4, 30).chunks == 4
    # The run is the new baseline, versioned with its run id; the old one is kept.
    state = Path(result.promotion.baseline).parent
    assert loads_baseline(Path(result.promotion.baseline).read_text()).run_id == run_id
    assert any(p.name.endswith(f"-{run_id}.json") for p in (state / bp.name).iterdir())
    # The report: a plot, and a markdown artifact with the verdict and the plot inline.
    assert Path(result.gate.plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    markdown = _artifact(f"gate-{bp.name}").data
    assert "# Promotion gate: PASS" in markdown and "data:image/png;base64," in markdown
    assert _artifact(f"gate-{bp.name}-short").type == "table"
    # What the candidate's engines and GPUs said, read around the point: queueing on both roles,
    # the GPUs of both roles busy (the cluster's DCGM exporter), and why no KV transfer figure.
    assert "## What the servers said" in markdown
    assert "vLLM's MooncakeConnector exports no transfer metrics" in markdown
    figures = json.loads(Path(result.gate.report).read_text())["server"]["short"]["4"]
    assert figures["prefill_queue_ms_mean"] is not None and figures["decode_queue_ms_mean"] is not None
    assert 0 < figures["prefill_gpu_util"] <= 100 and 0 < figures["decode_gpu_util"] <= 100, figures
    assert figures["kv_transfer_ms_mean"] is None and figures["spec_acceptance"] is None
    [event] = _gate_events(bp.name, run_id)
    assert event["event"] == "pdlift.gate.pass" and event["payload"]["outcome"] == "PASS"


@timing
def test_a_candidate_20_percent_slower_on_tpot_fails_and_is_rolled_back(bench_env):
    stacks = bench_env
    stacks.engine_rules("green", latency={"tpot_scale": 1.2})
    before = _snapshot(stacks)
    with pytest.raises(BenchmarkBelowGate, match="tpot_mean") as failed:
        _flow(stacks.directory / "bp.yaml", "slow-" + uuid.uuid4().hex[:6])
    assert "rolled back (gate FAIL" in str(failed.value)
    assert _green_is_gone(stacks)
    assert _production_colour(stacks) == "blue" and _snapshot(stacks) == before


def test_a_sequential_benchmark_stops_a_30_percent_slower_candidate_early_and_rolls_it_back(bench_env, tmp_path):
    stacks, run_id = bench_env, "seq-" + uuid.uuid4().hex[:6]
    scenario = {"name": "short", "input_tokens": 1000, "output_tokens": 8, "concurrencies": [4], "duration_s": 24,
                "max_requests": 2000, "warmup_requests": 4}
    path = stacks.write_blueprint("seq.yaml", benchmark={"scenarios": [scenario], "sequential": {"rounds": 6}})
    stacks.engine_rules("green", latency={"tpot_scale": 1.3})
    with pytest.raises(BenchmarkBelowGate, match="tpot_mean") as failed:
        _flow(path, run_id)
    assert "rolled back (gate FAIL" in str(failed.value) and _green_is_gone(stacks)
    bench = tmp_path / "state" / "runs" / stacks.blueprint.name / run_id / "bench"
    report = (bench / "gate.md").read_text()
    [stop] = json.loads((bench / "results.json").read_text())["stops"]
    assert 2 <= stop["rounds"] < 6 and stop["reason"] == "decided"            # early: before the 6-round cap
    assert "## How the decision was reached" in report
    assert f"| short | 4 | {stop['rounds']} |" in report
    assert f"a critical check FAILed at round {stop['rounds']}" in report
    assert sorted(p.name for p in (bench / "raw").iterdir()) == [f"short-c4-r{k}.json" for k in range(stop["rounds"])]


def test_five_percent_request_errors_fail_the_gate(bench_env):
    stacks = bench_env
    stacks.engine_rules("green", faults={"error_rate": 0.05}, role="decode")
    before = _snapshot(stacks)
    with pytest.raises(BenchmarkBelowGate, match="error_rate") as failed:
        _flow(stacks.directory / "bp.yaml", "errors-" + uuid.uuid4().hex[:6])
    assert "2 of 40 requests failed (5.00%)" in str(failed.value)
    assert _green_is_gone(stacks) and _snapshot(stacks) == before


def test_too_few_samples_is_inconclusive_and_by_default_rolls_the_candidate_back_without_asking_anyone(bench_env):
    stacks, run_id = bench_env, "undecided-" + uuid.uuid4().hex[:6]
    # gate.undecided: rollback, the default, said out loud (a run that asked anyway would show its
    # pause in its states, then roll back after these 20 s)
    path = stacks.write_blueprint("undecided.yaml", gate={"min_samples": 500, "undecided": "rollback"},
                                  promotion={"approval_timeout_s": 20})
    before = _snapshot(stacks)
    with pytest.raises(BenchmarkBelowGate, match="not shown non-inferior within its budget") as failed:
        _flow(path, run_id)
    message = str(failed.value)
    assert "rolled back (gate INCONCLUSIVE" in message and "gate.undecided is rollback" in message
    report = json.loads(Path(message.rsplit("Report: ", 1)[1]).read_text())
    assert report["outcome"] == "INCONCLUSIVE" and report["reasons"]
    assert all(reason in message for reason in report["reasons"][:5])  # the figures a person would need
    assert "< min_samples 500" in message
    assert _green_is_gone(stacks) and _production_colour(stacks) == "blue" and _snapshot(stacks) == before
    states = _states(run_id)
    assert "FAILED" in states and "PAUSED" not in states, states  # nobody was asked


def test_too_few_samples_is_inconclusive_and_an_approval_resumes_the_run_to_promotion(bench_env):
    stacks, run_id = bench_env, "few-" + uuid.uuid4().hex[:6]
    path = stacks.write_blueprint("few.yaml", gate={"min_samples": 500, "undecided": "ask"})
    approver = Approver(run_id, {"approve": True, "note": "sandbox noise, numbers look right"})
    approver.start()
    result = _flow(path, run_id)
    approver.join(timeout=5)
    assert approver.paused_state == "Paused" and "PAUSED" in _states(run_id)
    assert result.gate.outcome == "INCONCLUSIVE" and result.outcome == "promoted"
    assert "approved by a person: sandbox noise" in result.decision
    assert _production_colour(stacks) == "green"


def test_no_decision_within_the_approval_timeout_rolls_the_candidate_back(bench_env):
    stacks = bench_env
    path = stacks.write_blueprint("wait.yaml", gate={"min_samples": 500, "undecided": "ask"},
                                  promotion={"approval_timeout_s": 3})
    before, run_id = _snapshot(stacks), "wait-" + uuid.uuid4().hex[:6]
    with pytest.raises(BenchmarkBelowGate, match="no decision within 3 s"):
        _flow(path, run_id)
    assert _green_is_gone(stacks) and _snapshot(stacks) == before
    assert "PAUSED" in _states(run_id)  # it waited for a person first


# The paired gate (gate.paired): green measured at once with the live blue under one request
# stream, 18 s of load in 3 looks, judged per 1 s window (widened to 3 request times if longer).
PAIRED_POINT = {"name": "short", "input_tokens": 1000, "output_tokens": 8, "concurrencies": [4], "duration_s": 18,
                "max_requests": 2000, "warmup_requests": 4}
PAIRED = {"window_s": 1.0, "looks": 3, "contracts": {"ttft": 1.15, "tpot": 1.15}, "guard": None}


def _paired_flow(stacks, run_id: str):
    from flows.benchmark import benchmark_flow

    path = stacks.write_blueprint("paired.yaml", gate={"paired": PAIRED}, benchmark={"scenarios": [PAIRED_POINT]})
    return benchmark_flow(str(path), run_id, colour="green", paired="blue")


@timing
def test_a_paired_gate_passes_an_equal_candidate_measured_beside_the_live_colour_and_switches_to_it(bench_env, tmp_path):
    stacks, bp, run_id = bench_env, bench_env.blueprint, "paired-" + uuid.uuid4().hex[:6]
    result = _paired_flow(stacks, run_id)
    assert result.gate.outcome == "PASS" and result.outcome == "promoted", result.gate.reasons
    assert _production_colour(stacks) == "green" and result.promotion.previous == "blue"
    bench = tmp_path / "state" / "runs" / bp.name / run_id / "bench"
    [stop] = json.loads((bench / "results.json").read_text())["stops"]
    # Both colours got the same stream at once: one raw file per colour and round, same prompts'
    # salt and seed, blue's through its own router, their measured windows overlapping.
    for k in range(stop["rounds"]):
        ours = json.loads((bench / "raw" / f"short-c4-r{k}.json").read_text())
        theirs = json.loads((bench / "raw" / f"short-c4-r{k}-baseline.json").read_text())
        assert (ours["spec"]["salt"], ours["spec"]["seed"]) == (theirs["spec"]["salt"], theirs["spec"]["seed"])
        assert ours["spec"]["base_url"] != theirs["spec"]["base_url"]
        first = max(ours["records"][0]["send_ts"], theirs["records"][0]["send_ts"])
        last = min(ours["records"][-1]["send_ts"], theirs["records"][-1]["send_ts"])
        assert last - first > 3.0, (first, last)
    report = (bench / "gate.md").read_text()
    assert "## Paired windows" in report and "jackknife" in report
    assert f"Stopped at look {stop['rounds']} of 3: every check PASSed" in report
    gate = json.loads(Path(result.gate.report).read_text())
    contracts = [r for r in gate["rows"] if r["check"] == "paired contract"]
    assert {r["metric"] for r in contracts} == {"ttft_mean", "tpot_mean"}
    assert all(r["verdict"] == "PASS" and r["ci"][1] <= 1.15 for r in contracts), contracts


@timing
def test_a_paired_gate_fails_a_candidate_30_percent_slower_on_tpot_early_and_rolls_it_back(bench_env, tmp_path):
    stacks, run_id = bench_env, "paired-slow-" + uuid.uuid4().hex[:6]
    stacks.engine_rules("green", latency={"tpot_scale": 1.3})
    before = _snapshot(stacks)
    with pytest.raises(BenchmarkBelowGate, match="tpot significantly worse than 1.15|tpot ratio") as failed:
        _paired_flow(stacks, run_id)
    assert "rolled back (gate FAIL" in str(failed.value) and _green_is_gone(stacks)
    assert _production_colour(stacks) == "blue" and _snapshot(stacks) == before
    bench = tmp_path / "state" / "runs" / stacks.blueprint.name / run_id / "bench"
    [stop] = json.loads((bench / "results.json").read_text())["stops"]
    assert stop["rounds"] < 3 and stop["reason"] == "decided", stop                 # early: before its last look
    assert "a check FAILed" in (bench / "gate.md").read_text()
