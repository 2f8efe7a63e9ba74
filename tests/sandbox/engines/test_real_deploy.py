"""The real-engine tier end to end: pdlift's own commands, run as a user runs them, take the sandbox
(`scripts/sandbox up --real-engines`) from an empty account to a real vLLM prefill/decode pair on a
real model, and measure it.

reserve -> launch -> fabric validate -> weights manifest -> stage-weights -> deploy: the converted
SmolLM2 checkpoint goes S3 -> the real stager -> each node's NVMe, and the Kubernetes stand-in runs
the rendered pods with vLLM's CPU build, loading the weights from the staged copy. Then:

* the canary passes on vLLM's own counters (decode loaded the prompt over NIXL, computed none);
* the same decode engine without the connector fails the canary, naming the recompute;
* with the connector back, a benchmark (isl-256 at concurrency 1 for 60 s) records this
  machine's baseline, and `pdlift benchmark-gate` measures again with the server-side figures
  read from the real engines' /metrics, and reaches a verdict.

Selected only by `scripts/test --real-engines` (marker ``real_engines``).
"""

from __future__ import annotations

import json
import os
import random
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from blueprints.loader import load_blueprint
from sandbox.engines import real
from tasks.runs import run_id_of

pytestmark = [pytest.mark.real_engines, pytest.mark.timeout(3600)]
REPO = Path(__file__).resolve().parents[3]
BLUEPRINT = REPO / "blueprints" / "sandbox-real-vllm.yaml"
COMMAND_TIMEOUT_S = 900
READY_TIMEOUT_S = 900


class Site:
    """A sandbox with real engines in a state dir of its own, and pdlift's CLI pointed at it."""

    def __init__(self, state: Path):
        self.state, self.bp = state, load_blueprint(BLUEPRINT)
        self.base_env = {**os.environ, "PDLIFT_REAL_ENGINES_HOME": str(real.home()), "PDLIFT_STATE_DIR": str(state),
                         "PREFECT_HOME": str(state / "prefect-home"), "DO_NOT_TRACK": "1",
                         "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PYTHONPATH": str(REPO)}
        for name in [k for k in self.base_env if k.startswith(("AWS_", "PREFECT_API_URL", "KUBECONFIG"))]:
            self.base_env.pop(name)
        self.env: dict[str, str] = {}
        self.seconds: dict[str, float] = {}

    def sandbox(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(REPO / "scripts" / "sandbox"), "--state-dir", str(self.state), *args],
                              env=self.base_env, cwd=REPO, capture_output=True, text=True, timeout=600)

    def up(self) -> None:
        octet = random.randint(150, 199)
        done = self.sandbox("up", "--real-engines", "--node-address-base", f"127.0.{octet}.11")
        assert done.returncode == 0, done.stdout + done.stderr
        self.up_output = done.stdout
        env = dict(self.base_env)
        for line in (self.state / "sandbox.env").read_text().splitlines():
            if line.startswith("export "):
                name, _, value = line[len("export "):].partition("=")
                env[name] = shlex.split(value)[0] if value else ""
        self.env = env

    def pdlift(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "cli.main", *args], env=self.env, cwd=REPO,
                              capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
        self.seconds[" ".join(args[:2])] = time.monotonic() - started
        if check:
            assert done.returncode == 0, f"pdlift {' '.join(args)}: exit {done.returncode}\n{done.stderr[-4000:]}"
        return done

    def api(self):
        from kubernetes import config

        return config.new_client_from_config(config_file=self.env["KUBECONFIG"])


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    missing = real.installed()
    if missing:
        pytest.fail(f"the real-engine tier is not installed: {missing}")
    s = Site(tmp_path_factory.mktemp("real-site"))
    try:
        s.up()
        bp = str(BLUEPRINT)
        for stage in (["reserve", bp], ["launch", bp], ["fabric", "validate", bp],
                      ["weights", "manifest", s.bp.model.weights_uri], ["stage-weights", bp]):
            s.pdlift(*stage)
        s.deployed = json.loads(s.pdlift("deploy", bp).stdout)
        print(f"\nreal site: sandbox up + stages {json.dumps({k: round(v) for k, v in s.seconds.items()})}")
        yield s
    finally:
        print(s.sandbox("down").stdout)


def _engine_log(site: Site, role: str) -> str:
    from kubernetes import client

    core = client.CoreV1Api(site.api())
    ns = f"{site.bp.name}-blue"
    (pod,) = [p for p in core.list_namespaced_pod(ns).items if p.metadata.name.startswith(f"{role}-")
              and p.status.phase == "Running"]
    return core.read_namespaced_pod_log(pod.metadata.name, ns, container=pod.spec.containers[0].name)


def _canary_counts(summary: str) -> tuple[float, float]:
    loaded = summary.split("decode loaded ", 1)[1]
    return float(loaded.split(",")[0]), float(loaded.split("computed ", 1)[1].split(";")[0])


def test_pdlift_stages_the_real_model_and_its_canary_passes_on_vllms_own_counters(site):
    assert "model: 5 objects uploaded" in site.up_output  # the converted checkpoint, not synthetic shards
    nodes = sorted((site.state / "sandbox" / "nodes").glob("i-*/nvme/models/smollm2-135m"))
    assert len(nodes) == 2 and all((n / ".pdlift-staged.json").exists() for n in nodes)
    assert all((n / "model.safetensors").stat().st_size == (real.model_dir() / "model.safetensors").stat().st_size
               for n in nodes)
    summary = site.deployed["canary"]
    loaded, computed = _canary_counts(summary)
    assert loaded >= 1024 - site.bp.engine.block_size and computed <= site.bp.engine.block_size, summary
    print(f"\nreal canary: {summary}")
    decode = _engine_log(site, "decode")
    # The staged copy, at the container path on both engines (their NIXL compatibility hashes agree).
    assert "'model': '/models/pdlift/smollm2-135m'" in decode
    assert "Backend UCX was instantiated" in decode and "NIXL compatibility check passed" in decode


def test_a_decode_engine_without_the_connector_fails_the_canary_naming_the_recompute(site):
    from kubernetes import client

    from tasks.stages import deploy as stage
    from tasks.stages.deploy import DeployOptions
    from tasks.wiring import Wiring

    api = client.CustomObjectsApi(site.api())
    lws = api.get_namespaced_custom_object("leaderworkerset.x-k8s.io", "v1", f"{site.bp.name}-blue",
                                           "leaderworkersets", "decode")
    spec = lws["spec"]["leaderWorkerTemplate"]
    container = (spec.get("leaderTemplate") or spec["workerTemplate"])["spec"]["containers"][0]
    script = site.decode_script = container["args"][0]
    kept = [line for line in script.splitlines() if not line.lstrip().startswith("--kv-transfer-config")]
    assert len(kept) == len(script.splitlines()) - 1, script
    _set_decode_script(site, "\n".join(kept) + "\n")
    _wait_rolled(site, "decode", "--kv-transfer-config", present=False)

    with Wiring(site.bp, environ=site.env) as wiring:
        report = stage.run_canary(site.bp, wiring.kube, wiring.engines, "blue", DeployOptions())
    print(f"\nreal canary, decode without the connector: {report.summary()}")
    assert not report.ok
    assert any("recomputed the prefill instead of loading the KV" in p for p in report.problems), report.problems
    assert report.computed_tokens >= 1024 - site.bp.engine.block_size and report.loaded_tokens == 0


def test_with_the_connector_back_a_benchmark_gates_on_the_real_engines_figures(site):
    # Put the rendered decode back and wait for its rollout, then deploy again (a re-apply that
    # changes nothing). `pdlift deploy` straight over the hand-edited LWS raced the rollout it
    # started: its wait saw the old decode pod Ready, and the LWS controller replaced that pod
    # under the canary ("no ready router or engine leader left for the canary").
    _set_decode_script(site, site.decode_script)
    _wait_rolled(site, "decode", "--kv-transfer-config", present=True)
    again = json.loads(site.pdlift("deploy", str(BLUEPRINT)).stdout)
    loaded, computed = _canary_counts(again["canary"])
    assert loaded > 0 and computed <= site.bp.engine.block_size, again["canary"]

    site.pdlift("benchmark", str(BLUEPRINT), "--colour", "blue", "--save-baseline", "--run-id", "real-baseline")
    baseline = json.loads((site.state / "baselines" / f"{site.bp.name}.json").read_text())
    # Measured here: the gate compares the candidate with this machine's own figures.
    assert baseline["run_id"] == "real-baseline"
    assert [p["concurrency"] for p in baseline["scenarios"]["isl-256"]] == [1]
    gated = site.pdlift("benchmark-gate", str(BLUEPRINT), "--colour", "blue", check=False)
    bench = site.state / "runs" / site.bp.name / run_id_of(site.bp) / "bench"
    report = json.loads((bench / "gate.json").read_text())
    assert report["outcome"] in ("PASS", "FAIL", "INCONCLUSIVE")
    assert gated.returncode == (0 if report["outcome"] == "PASS" else 1), gated.stderr[-2000:]
    summaries = json.loads((bench / "results.json").read_text())["summaries"]
    assert [s["concurrency"] for s in summaries] == [1]
    for s in summaries:
        assert s["completed"] > 0 and s["ttft"]["mean"] > 0 and s["tpot"]["mean"] > 0
    figures = {}
    for raw in sorted((bench / "raw").glob("*.json")):
        point = json.loads(raw.read_text())
        for name, (num, den) in point["server"]["figures"].items():
            figures.setdefault(name, []).append((num, den))
    # vLLM's own histograms: queue time on both roles, NIXL transfer time and bytes on decode.
    for name in ("prefill_queue_ms_mean", "decode_queue_ms_mean", "kv_transfer_ms_mean", "kv_transfer_mib_mean"):
        assert name in figures and all(den > 0 for _, den in figures[name]), (name, figures)
    table = {s["concurrency"]: (round(s["ttft"]["mean"]), round(s["tpot"]["mean"], 1), s["completed"])
             for s in summaries}
    means = {name: round(sum(n for n, _ in v) / sum(d for _, d in v), 2) for name, v in figures.items()}
    print(f"\nreal benchmark: gate {report['outcome']}; (TTFT ms, TPOT ms, requests) by concurrency {table}; "
          f"server figures {means}; commands {json.dumps({k: round(v) for k, v in site.seconds.items()})}")


def _set_decode_script(site: Site, script: str) -> None:
    """Replace the decode LWS's container script, as an operator's ``kubectl edit`` would."""
    from kubernetes import client

    api = client.CustomObjectsApi(site.api())
    ns, group = f"{site.bp.name}-blue", ("leaderworkerset.x-k8s.io", "v1")
    lws = api.get_namespaced_custom_object(*group, ns, "leaderworkersets", "decode")
    spec = lws["spec"]["leaderWorkerTemplate"]
    (spec.get("leaderTemplate") or spec["workerTemplate"])["spec"]["containers"][0]["args"][0] = script
    api.replace_namespaced_custom_object(*group, ns, "leaderworkersets", "decode", lws)


def _wait_rolled(site: Site, role: str, flag: str, present: bool) -> None:
    """Until the role's leader runs the new template and is Ready (a real vLLM start: minutes)."""
    from kubernetes import client

    core = client.CoreV1Api(site.api())
    ns = f"{site.bp.name}-blue"
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        pods = [p for p in core.list_namespaced_pod(ns).items if p.metadata.name.startswith(f"{role}-")]
        for pod in pods:
            args = " ".join(pod.spec.containers[0].args or [])
            ready = any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
            if (flag in args) == present and ready and pod.metadata.deletion_timestamp is None:
                return
        time.sleep(3)
    raise AssertionError(f"{role} did not come back ready {'with' if present else 'without'} {flag} "
                         f"within {READY_TIMEOUT_S} s")

