"""The deploy stage fails fast, with the reason, the events and the log lines, when the candidate
cannot come up or its KV path is wrong; and rejects a bad combination before any API call."""

from __future__ import annotations

import dataclasses
import re
import time

import pytest
from kubernetes import client

from tests.timing import timing
from blueprints.loader import load_blueprint
from tasks.adapters.kube_apply import KubeApply
from tasks.errors import ConfigError
from tasks.stages import deploy as stage
from tasks.errors import StackFailure
from tests.sandbox.deploy.conftest import FAST, write_blueprint

OPTIONS = stage.DeployOptions(limits=FAST)


def _deploy_fails(site, http) -> tuple[StackFailure, float]:
    started = time.monotonic()
    with pytest.raises(StackFailure) as failed:
        stage.deploy(site.blueprint, site.kube, http, options=OPTIONS, fabric=site.fabric)
    return failed.value, time.monotonic() - started


@timing
def test_a_bad_engine_flag_fails_the_stage_on_crash_loop_back_off_with_the_log_and_events(make_site, http):
    site = make_site(extra_args=["--no-such-flag"])
    failure, took = _deploy_fails(site, http)
    assert failure.reason == "CrashLoopBackOff"
    message = str(failure)
    assert "CrashLoopBackOff" in message and "last exit code 2" in message
    assert "unrecognized arguments: --no-such-flag" in message  # the log tail
    # The kubelet's events for the pod: the crash may be caught before its first back-off, so the
    # start of the container is what is sure to be there.
    events = message.split("\nevents:\n", 1)[1].split("\nlast log lines:", 1)[0]
    assert "Started container engine" in events
    assert took < 30


@timing
def test_an_image_that_cannot_be_pulled_fails_the_stage_on_image_pull_back_off(make_site, http, kube_sandbox):
    image = "registry.sandbox.test/missing/vllm@sha256:" + "0" * 64
    fault = kube_sandbox.fault(fault="image-pull", image_prefix="registry.sandbox.test/missing/")
    try:
        site = make_site(image=image)
        failure, took = _deploy_fails(site, http)
    finally:
        kube_sandbox.raw("DELETE", f"/__sandbox/faults?id={fault['id']}")
    assert failure.reason == "ImagePullBackOff"
    assert "ImagePullBackOff" in str(failure) and image in failure.diagnostics
    assert took < 30


@timing
def test_more_gpus_than_the_nodes_have_fails_fast_naming_failed_scheduling(make_site, http):
    site = make_site(gpus=4)  # the pods ask for 8
    failure, took = _deploy_fails(site, http)
    assert failure.reason == "FailedScheduling"
    assert "Insufficient nvidia.com/gpu" in str(failure)
    assert "FailedScheduling" in failure.diagnostics  # the scheduler's event
    assert took < FAST.unschedulable_grace_s + 15


def test_a_kv_path_that_fell_back_to_tcp_is_caught_by_the_canary(make_site, http, engine_faults):
    site = make_site()
    engine_faults({"namespace": f"{site.blueprint.name}-blue"}, {"tcp_fallback": True})
    failure, _ = _deploy_fails(site, http)
    assert failure.reason == "Canary"
    message = str(failure)
    # Mooncake's generic wheel: the fabric's counters stayed flat and the log names TCP.
    assert re.search(r"the prefill nodes' EFA devices counted 0 B during the canary, below 90%", message)
    assert re.search(r"the decode nodes' EFA devices counted 0 B during the canary, below 90%", message)
    assert "installed its TCP transport" in message and "mooncake-transfer-engine-efa" in message
    # The stack itself came up: only the canary could tell.
    assert all(p.ready for p in site.kube.pods(f"{site.blueprint.name}-blue", {}))


@pytest.mark.parametrize("engine, why", [
    ({"extra_args": ["--block-size", "32"]}, "sets --block-size"),  # prefill/decode block sizes would split
    ({"image": "vllm/vllm-openai:latest"}, "not pinned by digest"),
], ids=["extra-arg-overrides-a-rendered-flag", "image-not-pinned"])
def test_a_stack_unsafe_to_apply_is_rejected_before_any_api_call(tmp_path, http, engine, why):
    # (Engine/connector combinations the blueprint itself forbids never load: tests/unit. An
    # unpinned image is one of them now, so it is put in after loading: the deploy stage refuses
    # it again on its own.)
    engine = dict(engine)
    image = engine.pop("image", None)
    bp = load_blueprint(str(write_blueprint(tmp_path, "dp-invalid", engine)))
    if image:
        bp = bp.model_copy(update={"engine": bp.engine.model_copy(update={"image": image})})
    unreachable = client.ApiClient(client.Configuration(host="https://127.0.0.1:9"))
    with pytest.raises(ConfigError, match=why):  # not RemoteUnavailable: nothing was called
        stage.deploy(bp, KubeApply(unreachable), http, options=OPTIONS)


def test_a_phase_past_its_deadline_fails_naming_the_phase_with_the_events_and_last_log_lines(
        make_site, http, engine_faults):
    site = make_site()
    engine_faults({"namespace": f"{site.blueprint.name}-blue"}, {"slow_start_s": 120})
    # Long enough for the engines to print their first lines on a busy machine; the slow start is 120 s.
    limits = dataclasses.replace(FAST, started_s=10)
    with pytest.raises(StackFailure) as failed:
        stage.deploy(site.blueprint, site.kube, http, options=stage.DeployOptions(limits=limits), fabric=site.fabric)
    failure = failed.value
    assert failure.reason == "Timeout:started"
    message = str(failure)
    assert "phase 'started' did not finish within 10s" in message and "prefill-0 not started" in message
    assert "Startup probe failed" in message  # the kubelet's event
    assert "last log lines:" in message and "vLLM API server version" in message


def test_the_flow_leaves_the_failure_as_an_artifact_and_can_roll_the_candidate_back(
        make_site, kube_sandbox, prefect_harness, monkeypatch, tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from flows.deploy import deploy_flow

    site = make_site(extra_args=["--no-such-flag"])
    monkeypatch.setenv("KUBECONFIG", str(kube_sandbox.kubeconfig))
    monkeypatch.setenv("PDLIFT_STATE_DIR", str(tmp_path))
    with pytest.raises(StackFailure, match="CrashLoopBackOff"):
        deploy_flow(str(site.path), rollback_on_failure=True)
    key = f"deploy-failure-{site.blueprint.name}"
    with get_client(sync_client=True) as c:
        artifacts = c.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))
    assert artifacts and "unrecognized arguments: --no-such-flag" in artifacts[0].data
    assert "BackOff" in artifacts[0].data
    assert site.kube.get("v1", "Namespace", f"{site.blueprint.name}-blue") is None
