"""The recreate strategy on a fleet with no room for a second colour: four nodes, every engine pod
taking all 8 GPUs of its node. Production is probed from outside the product the whole time (its
endpoints, as a client inside the VPC reaches them) to measure the downtime independently.

A PASS moves production to the candidate; a slower candidate fails the gate and the snapshot of
the previous version is restored; a recreate cut off after the live engines were deleted is
restored and finished by the next run.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml

from sandbox.s3 import free_port
from tasks.adapters.service_routing import ServiceRouting
from tasks.errors import BenchmarkBelowGate
from tasks.planning.manifests import maintenance
from tasks.planning.manifests.common import COLOUR_LABEL, colour_namespace, stable_namespace
from tests.fixtures.kube import wait_for
from tests.fixtures.steady_load import stream_in_background
from tests.sandbox.bench.fixtures import ColourStacks

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_harness")]
BENCHMARK = {"repeats": 1, "scenarios": [{"name": "short", "input_tokens": 1000, "output_tokens": 8,
                                          "concurrencies": [4], "duration_s": 20, "max_requests": 40,
                                          "warmup_requests": 4}]}


@dataclass
class Fleet(ColourStacks):
    """The bench fixtures' two-colour helper on a fleet of four nodes (one colour fills it)."""

    run_id: str = ""
    connector: str = "mooncake"

    @property
    def path(self) -> Path:
        return self.directory / "bp.yaml"

    def production_colour(self) -> str | None:
        svc = self.kube.get("v1", "Service", self.name, stable_namespace(self.blueprint)) or {}
        return (svc.get("spec") or {}).get("selector", {}).get(COLOUR_LABEL)


class ProductionProbe:
    """GET /v1/models through production's ready endpoints every 0.2 s, as a client in the VPC
    would: (time, status) rows, 0 for "no ready endpoint" and -1 for a connection error."""

    def __init__(self, routing: ServiceRouting, namespace: str, service: str):
        self.routing, self.namespace, self.service = routing, namespace, service
        self.rows: list[tuple[float, int]] = []
        self.retry_after: set = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "ProductionProbe":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        with httpx.Client(timeout=5) as client:
            while not self._stop.is_set():
                ready = [e for e in self.routing.endpoints(self.namespace, self.service) if e.ready]
                status = 0
                if ready:
                    try:
                        r = client.get(ready[0].url + "/v1/models")
                        status = r.status_code
                        if status == 503:
                            self.retry_after.add(r.headers.get("Retry-After"))
                    except httpx.HTTPError:
                        status = -1
                self.rows.append((time.monotonic(), status))
                self._stop.wait(0.2)

    def _down(self) -> tuple[int, int]:
        down = [i for i, (_, s) in enumerate(self.rows) if s != 200]
        assert down, "production never went down"
        return down[0], down[-1]

    def downtime_s(self) -> float:
        """First answer other than 200 to the first 200 after the last one."""
        first, last = self._down()
        return self.rows[last + 1][0] - self.rows[first][0]

    def statuses_while_down(self) -> set[int]:
        first, last = self._down()
        return {s for _, s in self.rows[first:last + 1]}


def _probe(fleet: Fleet) -> ProductionProbe:
    bp = fleet.blueprint
    return ProductionProbe(fleet.routing, stable_namespace(bp), bp.name)


def _write_blueprint(fleet: Fleet) -> None:
    fleet.write_blueprint(benchmark=BENCHMARK, promotion={"strategy": "recreate"})
    doc = yaml.safe_load(fleet.path.read_text())
    doc["kv_transfer"]["protocol"] = "tcp"  # no SSH nodes here: the EFA counters are test_canary_*'s
    doc["kv_transfer"]["connector"] = fleet.connector
    fleet.path.write_text(yaml.safe_dump(doc, sort_keys=False))


@pytest.fixture(scope="module")
def fleet_connector() -> str:
    """The KV connector of the fleet's blueprint (a module that imports ``fleet`` may override it)."""
    return "mooncake"


@pytest.fixture(scope="module")
def fleet(kube_sandbox, kube_client, tmp_path_factory, fleet_connector):
    """Four nodes, blue deployed by the deploy flow (its snapshot stored), production on blue and
    blue's measurement recorded as the same-fleet baseline, as blue's promotion leaves it."""
    from prefect.settings import PREFECT_LOCAL_STORAGE_PATH, temporary_settings

    from flows.deploy import deploy_flow
    from tasks.adapters.loadgen import run_load
    from tasks.planning.manifests import render_production_service
    from tasks.planning.manifests.router import router_name
    from tasks.stages import benchmark as bench
    from tasks.stages.aa_history import measured_build
    from tasks.stages.promote import record_baseline

    name = "rc" + uuid.uuid4().hex[:8]
    directory = tmp_path_factory.mktemp(name)
    fleet = Fleet(kube_sandbox, kube_client, directory, name, free_port(), run_id="rc-" + uuid.uuid4().hex[:6],
                  connector=fleet_connector)
    _write_blueprint(fleet)
    state = directory / "state"
    with pytest.MonkeyPatch.context() as env, \
            temporary_settings({PREFECT_LOCAL_STORAGE_PATH: directory / "prefect-results"}):
        env.setenv("PDLIFT_STATE_DIR", str(state))
        env.setenv("KUBECONFIG", str(kube_sandbox.kubeconfig))
        try:
            fleet.engine_rules()
            bp = fleet.blueprint
            fleet.join_nodes(("blue",))  # four nodes: one colour fills them
            deploy_flow(str(fleet.path), fleet.run_id, colour="blue", poll_s=0.5)
            fleet.kube.apply(render_production_service(bp, "blue"))
            wait_for(lambda: [e for e in fleet.routing.endpoints(name, name) if e.ready], timeout=60,
                     what="production's endpoints")
            url = _ready_url(fleet, name, router_name("blue"))
            measured = bench.run_benchmark(bp, url, bench.bench_dir(state, name, "blue"), "blue", run_load)
            record_baseline(state, bp, bench.read_results(measured.results_path), "blue", "blue",
                            build=measured_build(bp, fleet.kube, "blue"))
            yield fleet
        finally:
            fleet.cleanup()


def _ready_url(fleet: Fleet, namespace: str, service: str) -> str:
    """A ready endpoint of the Service (a readiness probe may lag on a busy machine)."""
    ready = wait_for(lambda: [e for e in fleet.routing.endpoints(namespace, service) if e.ready], timeout=60,
                     what=f"a ready endpoint of {namespace}/{service}")
    return ready[0].url


@pytest.fixture(autouse=True)
def production_answering(fleet):
    """Each test starts from what a finished recreate leaves: production answering, no maintenance."""
    bp = fleet.blueprint
    url = _ready_url(fleet, stable_namespace(bp), bp.name)
    wait_for(lambda: _maintenance_gone(fleet) and httpx.get(url + "/v1/models", timeout=5).status_code == 200,
             timeout=60, what="production answering 200 with no maintenance responder")
    return fleet


def _recreate(fleet: Fleet):
    from flows.update import recreate_flow
    return recreate_flow(str(fleet.path), fleet.run_id)


def _maintenance_gone(fleet: Fleet) -> bool:
    return fleet.kube.get("apps/v1", "Deployment", maintenance.MAINTENANCE, stable_namespace(fleet.blueprint)) is None


def _in_flight(fleet: Fleet, max_tokens: int) -> tuple[threading.Thread, list]:
    """A long streaming completion through production, started now; its outcome lands in the list."""
    bp = fleet.blueprint
    return stream_in_background(_ready_url(fleet, stable_namespace(bp), bp.name), bp.model.name, max_tokens)


def test_a_recreate_that_passes_moves_production_to_the_candidate_and_measures_its_downtime(fleet):
    live = fleet.production_colour()
    candidate = "green" if live == "blue" else "blue"
    with _probe(fleet) as probe:
        # Long enough (30 s at the sandbox engines' 10 ms TPOT) to outlast the prepull and the switch to
        # maintenance before the drain: 1200 tokens (12 s), on a busy machine (prepull 6.3 s,
        # maintenance_on 3.8 s), it had ended before the drain began.
        request, outcome = _in_flight(fleet, max_tokens=3000)
        time.sleep(0.5)
        result = _recreate(fleet)
        request.join(timeout=120)
        time.sleep(1.0)
    # The request in flight when production went into maintenance finished on the old engines,
    # and pdlift waited for it before deleting them (the sandbox's engines would also drain on
    # SIGTERM; real prefill engines do not wait for KV transfers then: vllm#34730).
    [done] = outcome
    assert not isinstance(done, Exception) and done.chunks >= 3000, done
    assert result["phases_s"]["drain"] >= 0.5, result["phases_s"]
    assert result["outcome"] == "promoted" and result["colour"] == candidate
    assert fleet.production_colour() == candidate
    assert fleet.kube.get("v1", "Namespace", colour_namespace(fleet.blueprint, live)) is None  # no second colour
    assert _maintenance_gone(fleet)
    # Down means 503 with Retry-After from the maintenance responder, never a refused connection.
    assert probe.statuses_while_down() == {503}, probe.rows
    # Clients are told to come back after the planned downtime.
    assert probe.retry_after == {str(max(1, int(result["downtime_estimate_s"])))}
    phases = result["phases_s"]
    assert {"maintenance_on", "drain", "remove", "bring_up", "benchmark_and_switch"} <= set(phases)
    # The product's figure (switched to maintenance -> production answered through every
    # endpoint) never under-reports what a client saw, and is close to it.
    seen = probe.downtime_s()
    assert seen - 0.5 <= phases["downtime"] <= seen + 3.0, (seen, phases)
    assert probe.rows[-1][1] == 200
    # An unchanged build measured against its own recorded baseline: its offsets are the
    # deployment's first A/A comparison, and the baseline its promotion recorded names the build.
    [comparison] = _aa_history(fleet)
    assert comparison.baseline_run_id == "blue" and comparison.build == _recorded(fleet).build != ""
    assert {"ttft_mean", "tpot_mean"} <= set(comparison.offsets)


def _aa_history(fleet: Fleet):
    from tasks.stages.aa_history import read_history
    return read_history(fleet.directory / "state", fleet.blueprint.name)


def _seed_aa_history(fleet: Fleet):
    """One A/A comparison of the recorded build, as the passing recreate leaves (run alone)."""
    from tasks.planning.aa_offsets import Comparison, dumps_history
    from tasks.stages.aa_history import history_path
    path = history_path(fleet.directory / "state", fleet.blueprint.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps_history([Comparison("seed/1", "2026-12-01T00:00:00Z", _recorded(fleet).build, "blue",
                                              {"tpot_mean": {"x@1": (0.01, 0.0)}})]))
    return _aa_history(fleet)


def _recorded(fleet: Fleet):
    from tasks.stages import benchmark as bench
    return bench.current_baseline(fleet.directory / "state", fleet.blueprint)


def test_a_candidate_image_the_nodes_cannot_pull_stops_the_recreate_before_production_goes_down(fleet):
    from tasks.errors import StageFailed
    from tasks.planning.manifests import prepull

    live = fleet.production_colour()
    broken = "registry.example/vllm@sha256:" + "0" * 64
    doc = yaml.safe_load(fleet.path.read_text())
    doc["engine"]["image"] = broken
    fleet.path.write_text(yaml.safe_dump(doc, sort_keys=False))
    fleet.sandbox.fault(fault="image-pull", image_prefix=broken)
    try:
        with _probe(fleet) as probe, pytest.raises(StageFailed, match="cannot be pulled") as refused:
            _recreate(fleet)
            time.sleep(0.5)
    finally:
        fleet.sandbox.clear_faults()
        _write_blueprint(fleet)
    # Named per node, with the kubelet's reason; production never left the live colour.
    message = str(refused.value)
    assert broken in message and ("ErrImagePull" in message or "ImagePullBackOff" in message), message
    assert "still serves" in message and "engine.image" in message
    assert fleet.production_colour() == live and _maintenance_gone(fleet)
    assert probe.rows and {s for _, s in probe.rows} == {200}, probe.rows
    wait_for(lambda: not fleet.kube.pods(stable_namespace(fleet.blueprint), prepull.selector(fleet.blueprint)),
             timeout=30, what="the prepull pods deleted")


def test_a_slower_candidate_fails_the_gate_and_the_previous_version_is_restored(fleet):
    live = fleet.production_colour()
    candidate = "green" if live == "blue" else "blue"
    before = _aa_history(fleet) or _seed_aa_history(fleet)
    fleet.engine_rules(candidate, latency={"tpot_scale": 1.4})
    try:
        with _probe(fleet) as probe, pytest.raises(BenchmarkBelowGate, match="tpot_mean"):
            _recreate(fleet)
    finally:
        fleet.engine_rules()
    assert fleet.production_colour() == live
    bp = fleet.blueprint
    assert fleet.kube.get("v1", "Namespace", colour_namespace(bp, candidate)) in (None,) or \
        fleet.kube.get("v1", "Namespace", colour_namespace(bp, candidate))["metadata"].get("deletionTimestamp")
    assert _maintenance_gone(fleet)
    assert probe.statuses_while_down() == {503} and probe.rows[-1][1] == 200
    # Judged with the between-session spread the A/A history shows; the same build FAILing is a
    # fault, not drift: no A/A offset recorded.
    report = json.loads((fleet.directory / "state" / "runs" / bp.name / fleet.run_id / "bench" / "gate.json")
                        .read_text())
    assert any("A/A comparison(s)" in r["method"] for r in report["rows"] if r["metric"] == "tpot_mean")
    assert _aa_history(fleet) == before


def _cut_off_after_removing_the_live_colour(fleet: Fleet):
    """What a worker killed right after deleting the live engines leaves behind."""
    from flows import pipeline
    from tasks import update as steps

    live = fleet.production_colour()
    run = pipeline.start(str(fleet.path), fleet.run_id)
    snap = steps.snapshot(run, live)
    steps.drain(run, snap, 30, steps.generation(run))
    steps.remove(run, live)
    assert fleet.production_colour() is None and not _maintenance_gone(fleet)
    return run, live


def test_a_recreate_cut_off_with_the_live_engines_deleted_is_restored_then_finished_by_the_next_run(fleet):
    _, live = _cut_off_after_removing_the_live_colour(fleet)
    with _probe(fleet) as probe:
        result = _recreate(fleet)
    assert result["outcome"] == "promoted" and fleet.production_colour() == result["colour"]
    assert result["previous"] == live  # the cut-off colour was put back first, then replaced
    assert _maintenance_gone(fleet) and probe.rows[-1][1] == 200


def test_a_recreate_cut_off_after_its_candidate_came_up_goes_on_at_the_gate(fleet):
    from flows.deploy import deploy_flow

    run, live = _cut_off_after_removing_the_live_colour(fleet)
    candidate = "green" if live == "blue" else "blue"
    deploy_flow(str(fleet.path), fleet.run_id, colour=candidate, poll_s=0.5)
    uid = fleet.kube.get("v1", "Namespace", colour_namespace(fleet.blueprint, candidate))["metadata"]["uid"]
    result = _recreate(fleet)
    assert result["outcome"] == "promoted" and fleet.production_colour() == candidate
    # The candidate it found was judged and promoted, not torn down and brought up again.
    assert fleet.kube.get("v1", "Namespace", colour_namespace(fleet.blueprint, candidate))["metadata"]["uid"] == uid
    assert _maintenance_gone(fleet)
