"""The real-engine tier: the prefill and decode pods pdlift renders for blueprints/sandbox-real-vllm.yaml,
run by vLLM's CPU build (not the simulation) on a real small model, with NIXL moving the KV cache.

Selected only by `scripts/test --real-engines` (marker ``real_engines``; the plain suite deselects
it). Each container runs as the Kubernetes stand-in runs one: ``python -m sandbox.engines --
<command> <args>`` with the container's env, its fieldRefs resolved to the pod's address.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from blueprints.loader import load_blueprint, parse_blueprint
from sandbox.engines import real
from sandbox.engines.real import netns
from tasks.planning.manifests.common import model_dir
from tasks.planning.manifests.render import render_stack

pytestmark = [pytest.mark.real_engines, pytest.mark.timeout(1500)]
REPO = Path(__file__).resolve().parents[3]
BLUEPRINT = REPO / "blueprints" / "sandbox-real-vllm.yaml"
PREFILL, DECODE = "127.0.9.41", "127.0.9.42"
START_TIMEOUT_S = 600
PROMPT = "The capital of France is"
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@pytest.fixture(scope="module")
def installed():
    missing = real.installed()
    if missing:
        pytest.fail(f"the real-engine tier is not installed: {missing}")


@pytest.fixture(scope="module")
def namespace(installed, tmp_path_factory):
    pid = netns.start_holder(tmp_path_factory.mktemp("netns") / "netns.pid")
    yield netns.path_of(pid)
    netns.stop_holder(pid)


def container(bp, role: str, address: str) -> tuple[list[str], dict[str, str]]:
    """The role's leader container as rendered: its command line and env (fieldRefs resolved)."""
    (lws,) = [o for o in render_stack(bp, "blue", bp.staging.local_path)
              if o["kind"] == "LeaderWorkerSet" and o["metadata"]["name"] == role]
    template = lws["spec"]["leaderWorkerTemplate"]
    spec = (template.get("leaderTemplate") or template["workerTemplate"])["spec"]["containers"][0]
    fields = {"status.podIP": address, "metadata.name": f"{role}-0", "metadata.namespace": f"{bp.name}-blue"}
    env = {}
    for item in spec.get("env", []):
        if "value" in item:
            env[item["name"]] = str(item["value"])
        elif "fieldRef" in item.get("valueFrom", {}):
            env[item["name"]] = fields[item["valueFrom"]["fieldRef"]["fieldPath"]]
    return [*spec["command"], *spec.get("args", [])], env


class Engine:
    def __init__(self, bp, role: str, address: str, namespace: str, logs: Path):
        argv, env = container(bp, role, address)
        self.address, self.port = address, bp.engine.prefill_port if role == "prefill" else bp.engine.decode_port
        self.log = logs / f"{role}.log"
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("PDLIFT_SANDBOX_")}, **env,
               "PDLIFT_SANDBOX_BIND": address, "PDLIFT_SANDBOX_REAL_ENGINES": str(real.venv()),
               "PDLIFT_SANDBOX_REAL_NETNS": namespace, "PYTHONPATH": str(REPO),
               "PDLIFT_SANDBOX_MOUNTS": json.dumps({model_dir(bp): str(real.model_dir())})}
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "sandbox.engines", "--", *argv], env=env, cwd=REPO,
                                         stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def url(self, path: str) -> str:
        return f"http://{self.address}:{self.port}{path}"

    def wait_healthy(self) -> float:
        started = time.monotonic()
        while time.monotonic() - started < START_TIMEOUT_S:
            if self.proc.poll() is not None:
                raise AssertionError(f"exited {self.proc.returncode}:\n{self.text()[-3000:]}")
            try:
                with _NO_PROXY.open(self.url("/health"), timeout=5) as resp:
                    if resp.status == 200:
                        return time.monotonic() - started
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(1)
        raise AssertionError(f"not healthy within {START_TIMEOUT_S} s:\n{self.text()[-3000:]}")

    def complete(self, body: dict) -> dict:
        req = urllib.request.Request(self.url("/v1/completions"), json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        with _NO_PROXY.open(req, timeout=300) as resp:
            return json.load(resp)

    def metrics(self) -> str:
        with _NO_PROXY.open(self.url("/metrics"), timeout=30) as resp:
            return resp.read().decode()

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=150)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


@pytest.fixture(scope="module")
def pair(namespace, tmp_path_factory):
    bp = load_blueprint(BLUEPRINT)
    logs = tmp_path_factory.mktemp("real-pair")
    engines = [Engine(bp, "prefill", PREFILL, namespace, logs), Engine(bp, "decode", DECODE, namespace, logs)]
    try:
        started = [engine.wait_healthy() for engine in engines]
        print(f"real pair healthy after {max(started):.0f} s")
        yield bp, engines[0], engines[1]
    finally:
        for engine in engines:
            engine.stop()


def test_the_rendered_pair_moves_the_prompts_kv_cache_with_nixl_and_decodes_what_one_engine_would(pair):
    bp, prefill, decode = pair
    name = bp.model.name
    alone = prefill.complete({"model": name, "prompt": PROMPT, "max_tokens": 8, "temperature": 0})
    first = prefill.complete({"model": name, "prompt": PROMPT, "max_tokens": 1, "temperature": 0,
                              "kv_transfer_params": {"do_remote_decode": True, "do_remote_prefill": False,
                                                     "remote_engine_id": None, "remote_block_ids": None,
                                                     "remote_host": None, "remote_port": None}})
    params = first["kv_transfer_params"]
    assert params["do_remote_prefill"] is True and params["remote_host"] == PREFILL and params["remote_block_ids"]
    rest = decode.complete({"model": name, "prompt": PROMPT, "max_tokens": 8, "temperature": 0,
                            "kv_transfer_params": params})
    assert rest["choices"][0]["text"] == alone["choices"][0]["text"]
    assert alone["choices"][0]["text"].startswith(" Paris")  # the real model, greedy
    log = decode.text()
    assert "NIXL compatibility check passed" in log and "Backend UCX was instantiated" in log
    assert "pdlift sandbox (real vLLM, CPU build): NixlConnector: kv_buffer_device cpu" in log
    assert "vllm:" in decode.metrics()  # vLLM's own Prometheus endpoint, through the forwarder


def test_a_rendered_flag_vllm_does_not_know_fails_the_pod_with_vllms_own_error(namespace, tmp_path):
    text = BLUEPRINT.read_text().replace("  block_size: 64\n", "  block_size: 64\n  extra_args: [--no-such-flag]\n")
    bp = parse_blueprint(text, "sandbox-real-vllm.yaml")
    engine = Engine(bp, "prefill", "127.0.9.43", namespace, tmp_path)
    try:
        assert engine.proc.wait(timeout=300) == 2
    finally:
        engine.stop()
    assert "unrecognized arguments: --no-such-flag" in engine.text()


def test_a_rendered_multi_node_group_is_refused_naming_the_flag(namespace, tmp_path):
    doc = yaml.safe_load(BLUEPRINT.read_text())
    doc["topology"]["prefill"] = {"nodes": 2, "tp": 1, "pp": 2}  # PP across two nodes (push: pull refuses pp > 1)
    doc["kv_transfer"]["nixl_mode"] = "push"
    bp = parse_blueprint(yaml.safe_dump(doc), "sandbox-real-vllm.yaml")
    engine = Engine(bp, "prefill", "127.0.9.44", namespace, tmp_path)
    assert engine.proc.wait(timeout=60) == 1
    assert "this vLLM command has no CPU equivalent: --nnodes 2" in engine.text()
