"""Fixtures for the benchmark, gate and promotion tests (a plugin listed in tests/conftest.py).

``colour_stacks`` (session; every test resets what it changed, see ``candidate_env``): a
blueprint of its own (unique name and router port), eight GPU nodes
joined to the session's Kubernetes stand-in (four per colour, labelled as stage 2 labels them),
the blue colour applied from the rendered manifests with the production Service routing to it,
and the engines of both colours given a 200 ms prefill (``BASE_LATENCY``) so a few milliseconds
of scheduling jitter on this shared machine stay small against what is measured.
``ColourStacks.deploy("green")`` brings a candidate up (about 3 s); ``engine_rules`` injects
latency or faults into one colour's engines through the stand-in's ``engines.json``.

One deviation from the rendered manifests: each colour's router Deployment gets a nodeSelector
for that colour's nodes. Pods of the stand-in share their node's address, so a blue and a green
router on one node would collide on the router port; on a real cluster each pod has its own IP.
"""

from __future__ import annotations

import json
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from blueprints.loader import load_blueprint
from blueprints.schema import Blueprint
from tasks.adapters.kube_apply import KubeApply
from tasks.adapters.service_routing import ServiceRouting
from tasks.planning.manifests import render_production_service, render_stack
from tasks.planning.manifests.common import colour_namespace, stable_namespace
from tasks.planning.manifests.router import router_name
from tests.fixtures.kube import wait_for
from sandbox.s3 import free_port as _free_port

REPO = Path(__file__).resolve().parents[3]
SANDBOX_BLUEPRINT = REPO / "blueprints" / "sandbox-2p2d.yaml"
BASE_LATENCY = {"prefill_base_s": 0.2}
COLOUR_LABEL = "pdlift.io/test-colour"
BENCHMARK = {"repeats": 1, "scenarios": [{"name": "short", "input_tokens": 1000, "output_tokens": 8,
                                          "concurrencies": [4], "duration_s": 30, "max_requests": 40,
                                          "warmup_requests": 4}]}
# The latency model's values for the scenario through PD with BASE_LATENCY: the blueprint's
# published figures, used only until a measured baseline is recorded.
BASELINE = {"source": "sandbox latency model", "cv": {"ttft": 0.15, "tpot": 0.15}, "scenarios": {"short": [
    {"concurrency": 4, "completed": 40, "ttft_ms_mean": 213.5, "tpot_ms_mean": 10.9}]}}
GATE = {"slo": {"ttft_ms": 5000, "tpot_ms": 200}, "min_samples": 8, "max_error_rate": 0.02,
        "rules": [{"metric": "ttft_mean", "max_ratio": 1.10, "critical": True},
                  {"metric": "tpot_mean", "max_ratio": 1.10, "critical": True},
                  {"metric": "output_tokens_per_s", "min_ratio": 0.80},
                  {"metric": "itl_mean", "report_only": True}]}


@dataclass
class ColourStacks:
    sandbox: object
    api: object
    directory: Path
    name: str
    router_port: int
    instance_ids: list[str] = field(default_factory=list)

    @property
    def kube(self) -> KubeApply:
        return KubeApply(self.api)

    @property
    def routing(self) -> ServiceRouting:
        return ServiceRouting(self.api)

    @property
    def rules_path(self) -> Path:
        return self.sandbox.state_dir / "sandbox" / "engines.json"

    def write_blueprint(self, filename: str = "bp.yaml", gate: dict | None = None,
                        promotion: dict | None = None, benchmark: dict | None = None) -> Path:
        doc = yaml.safe_load(SANDBOX_BLUEPRINT.read_text())
        doc["name"] = self.name
        doc["engine"]["router_port"] = self.router_port
        doc["benchmark"] = benchmark or BENCHMARK
        doc["baseline"] = BASELINE
        doc["gate"] = {**GATE, **(gate or {})}
        doc["promotion"] = {"strategy": "blue-green", "approval_timeout_s": 30, **(promotion or {})}
        path = self.directory / filename
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path

    @property
    def blueprint(self) -> Blueprint:
        return load_blueprint(str(self.directory / "bp.yaml"))

    def join_nodes(self, colours: tuple[str, ...] = ("blue", "green")) -> None:
        """Four nodes (two per role) for each of ``colours``, labelled with it."""
        bp = self.blueprint
        for colour in colours:
            for role in ("prefill", "prefill", "decode", "decode"):
                address = self.sandbox.next_address()
                labels = {"pdlift.io/role": role, "pdlift.io/deployment": bp.name,
                          "node.kubernetes.io/instance-type": bp.aws.instance_type, COLOUR_LABEL: colour,
                          "topology.k8s.aws/network-node-layer-1": "nn-l1",
                          "topology.k8s.aws/network-node-layer-2": "nn-l2",
                          "topology.k8s.aws/network-node-layer-3": f"nn-l3-{colour}-{role}"}
                allocatable = {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "16", "hugepages-2Mi": "8Gi",
                               "cpu": "192", "memory": "2048Gi"}
                name = f"ip-{address.replace('.', '-')}.us-east-2.compute.internal"
                self.instance_ids.append(self.sandbox.join(name, labels, [], allocatable, address=address))

    def deploy(self, colour: str, timeout: float = 60.0) -> str:
        """Apply the colour's rendered stack (after its old namespace, if being deleted, is gone)
        and wait until both of its routers are ready endpoints; returns the first router's URL."""
        bp = self.blueprint
        engines_ns, stable = colour_namespace(bp, colour), stable_namespace(bp)

        def old_namespace_gone() -> bool:
            ns = self.kube.get("v1", "Namespace", engines_ns)
            return ns is None or not ns["metadata"].get("deletionTimestamp")

        def routers_ready() -> list:
            ready = [e for e in self.routing.endpoints(stable, router_name(colour)) if e.ready]
            return ready if len(ready) >= 2 else []

        wait_for(old_namespace_gone, timeout=30, what=f"{engines_ns} to finish terminating")
        for obj in render_stack(bp, colour, "/models/pdlift/tiny-moe-mla"):
            if obj["kind"] == "Deployment":
                obj["spec"]["template"]["spec"]["nodeSelector"] = {COLOUR_LABEL: colour}
            self.kube.apply(obj)
        return wait_for(routers_ready, timeout=timeout, interval=0.3, what=f"the {colour} routers")[0].url

    def route_production_to(self, colour: str) -> None:
        self.kube.apply(render_production_service(self.blueprint, colour))

    def engine_rules(self, colour: str | None = None, latency: dict | None = None, faults: dict | None = None,
                     role: str | None = None, args_contain: str | None = None) -> None:
        """This deployment's rules in engines.json: the base latency for both colours, plus
        ``latency``/``faults`` for ``colour``'s engines (of ``role`` only, and only those whose
        command line contains ``args_contain``, when given). Rules of
        other tests are kept; engines re-read the file on its next change."""
        doc = json.loads(self.rules_path.read_text()) if self.rules_path.exists() else {"rules": []}
        rules = [r for r in doc.get("rules", []) if r.get("owner") != self.name]
        namespaces = [colour_namespace(self.blueprint, c) for c in ("blue", "green")]
        rules.append({"owner": self.name, "match": {"namespace": namespaces}, "latency": BASE_LATENCY})
        if colour and (latency or faults):
            match = {"namespace": colour_namespace(self.blueprint, colour), **({"role": role} if role else {}),
                     **({"args_contain": args_contain} if args_contain else {})}
            rules.append({"owner": self.name, "match": match, "latency": latency or {}, "faults": faults or {}})
        tmp = self.rules_path.with_suffix(".tmp")
        tmp.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps({**doc, "rules": rules}))
        tmp.replace(self.rules_path)

    def cleanup(self) -> None:
        if self.rules_path.exists():
            doc = json.loads(self.rules_path.read_text())
            doc["rules"] = [r for r in doc.get("rules", []) if r.get("owner") != self.name]
            self.rules_path.write_text(json.dumps(doc))
        bp = self.blueprint
        for ns in (stable_namespace(bp), colour_namespace(bp, "blue"), colour_namespace(bp, "green")):
            self.kube.delete("v1", "Namespace", ns)
        for iid in self.instance_ids:
            self.sandbox.leave(iid)


@pytest.fixture(scope="session")
def colour_stacks(kube_sandbox, kube_client, tmp_path_factory):
    name = "bg" + uuid.uuid4().hex[:8]
    stacks = ColourStacks(kube_sandbox, kube_client, tmp_path_factory.mktemp(name), name, _free_port())
    stacks.write_blueprint()
    try:
        stacks.engine_rules()
        stacks.join_nodes()
        stacks.deploy("blue")
        stacks.route_production_to("blue")
        yield stacks
    finally:
        stacks.cleanup()


@pytest.fixture(scope="session")
def blue_baseline(colour_stacks, tmp_path_factory) -> Path:
    """The blue colour measured by the benchmark stage and recorded as the baseline, as a
    promotion of blue would have left it: ``<state>/baselines/<name>.json`` in a state dir of its own."""
    from tasks.adapters.loadgen import run_load
    from tasks.stages import benchmark as bench
    from tasks.stages.promote import record_baseline

    bp, state = colour_stacks.blueprint, tmp_path_factory.mktemp("baseline-state")
    # blue's router may still be coming up (a test before this one redeployed it)
    url = wait_for(lambda: next((e.url for e in colour_stacks.routing.endpoints(bp.name, router_name("blue"))
                                 if e.ready), None), timeout=120, what="a ready endpoint of blue's router")
    for _ in range(3):  # a client saturated by a burst of other work on this machine measures again
        run = bench.run_benchmark(bp, url, bench.bench_dir(state, bp.name, "blue-run"), "blue-run", run_load)
        if not any(s.client_saturated for s in bench.read_results(run.results_path)):
            break
    return record_baseline(state, bp, bench.read_results(run.results_path), "blue-run", "blue")


@pytest.fixture
def candidate_env(colour_stacks, tmp_path, monkeypatch):
    """This process pointed at the stand-in (KUBECONFIG) with a state dir of its own; production
    routes to blue, green is up, and every engine has the base latency only."""
    monkeypatch.setenv("PDLIFT_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("KUBECONFIG", str(colour_stacks.sandbox.kubeconfig))
    colour_stacks.engine_rules()
    colour_stacks.deploy("blue")  # a test that promoted green has retired blue
    colour_stacks.route_production_to("blue")
    colour_stacks.deploy("green")
    yield colour_stacks
    colour_stacks.engine_rules()


@pytest.fixture
def bench_env(candidate_env, blue_baseline, tmp_path):
    """``candidate_env`` plus blue's measured baseline in the state dir, as blue's promotion left it."""
    target = tmp_path / "state" / "baselines" / blue_baseline.name
    target.parent.mkdir(parents=True)
    shutil.copy(blue_baseline, target)
    return candidate_env
