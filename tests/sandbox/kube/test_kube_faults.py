"""Faults: image pulls, crash loops (with the error in the pod log), slow starts, lost nodes."""

from __future__ import annotations

import time

from tests.fixtures.kube import wait_for
from tests.sandbox.kube.conftest import events_for, pod, pod_state, wait_running_ready

FAIL_WITH_ERROR = ["python3", "-c", "import sys; print('loading model...'); "
                   "print('error: unrecognized arguments: --bogus-flag', file=sys.stderr); sys.exit(1)"]


def _waiting_reason(core, ns, name):
    _, cs = pod_state(core, ns, name)
    return cs.state.waiting.reason if cs is not None and cs.state.waiting else None


def test_an_image_outside_the_allow_list_goes_to_image_pull_back_off(core, kube_namespace):
    core.create_namespaced_pod(kube_namespace, pod("pull", ["sleep", "60"],
                                                   image="docker.io/someone/unknown:latest"))
    wait_for(lambda: _waiting_reason(core, kube_namespace, "pull") == "ImagePullBackOff",
             what="ImagePullBackOff")
    failed = [e for e in events_for(core, kube_namespace, "pull") if e.reason == "Failed"]
    assert failed and failed[0].type == "Warning"
    assert 'Failed to pull image "docker.io/someone/unknown:latest"' in failed[0].message
    assert core.read_namespaced_pod("pull", kube_namespace).status.phase == "Pending"


def test_an_image_pinned_by_digest_is_always_pullable(core, kube_namespace):
    digest = "docker.io/someone/unknown@sha256:" + "0" * 64
    core.create_namespaced_pod(kube_namespace, pod("digest", ["sleep", "60"], image=digest))
    wait_running_ready(core, kube_namespace, "digest")


def test_a_container_that_exits_1_crash_loops_and_its_error_stays_in_the_pod_log(
        kube_sandbox, core, kube_namespace):
    core.create_namespaced_pod(kube_namespace, pod("crash", FAIL_WITH_ERROR))
    wait_for(lambda: _waiting_reason(core, kube_namespace, "crash") == "CrashLoopBackOff",
             what="CrashLoopBackOff")
    _, cs = pod_state(core, kube_namespace, "crash")
    assert cs.restart_count >= 1 and cs.last_state.terminated.exit_code == 1
    assert cs.ready is False
    # The log is the latest attempt's; poll, since a restart may have just begun a new one.
    wait_for(lambda: core.read_namespaced_pod_log("crash", kube_namespace, tail_lines=1)
             == "error: unrecognized arguments: --bogus-flag\n", what="the error in the pod log")
    wait_for(lambda: "--bogus-flag" in kube_sandbox.kubectl("logs", "-n", kube_namespace, "crash").stdout,
             what="kubectl logs to show the error")
    backoff = [e for e in events_for(core, kube_namespace, "crash") if e.reason == "BackOff"]
    assert backoff and "Back-off restarting failed container main" in backoff[0].message


def test_an_engine_command_runs_through_the_sandbox_engines_and_a_bad_flag_crash_loops(
        core, kube_namespace):
    core.create_namespaced_pod(kube_namespace, pod("engine", [
        "vllm", "serve", "/models/glm", "--port", "8000", "--no-such-engine-flag"]))
    wait_for(lambda: _waiting_reason(core, kube_namespace, "engine") == "CrashLoopBackOff",
             what="CrashLoopBackOff")
    wait_for(lambda: "unrecognized arguments: --no-such-engine-flag" in
             core.read_namespaced_pod_log("engine", kube_namespace), what="the engine's error")


def test_slow_start_keeps_containers_creating_for_the_given_time(kube_sandbox, core, kube_namespace):
    kube_sandbox.fault(fault="slow-start", seconds=2, namespace=kube_namespace)
    try:
        started = time.monotonic()
        core.create_namespaced_pod(kube_namespace, pod("slow", ["sleep", "60"]))
        wait_for(lambda: _waiting_reason(core, kube_namespace, "slow") == "ContainerCreating")
        wait_running_ready(core, kube_namespace, "slow")
        assert time.monotonic() - started >= 2.0
    finally:
        kube_sandbox.clear_faults()


def test_a_crash_fault_kills_a_running_container_once_and_it_restarts(kube_sandbox, core, kube_namespace):
    core.create_namespaced_pod(kube_namespace, pod("victim", ["sleep", "60"]))
    wait_running_ready(core, kube_namespace, "victim")
    kube_sandbox.fault(fault="crash", pod_prefix="victim", namespace=kube_namespace)
    try:
        def restarted():
            _, cs = pod_state(core, kube_namespace, "victim")
            return cs if cs.restart_count == 1 and cs.state.running else None
        cs = wait_for(restarted, what="the container to restart once")
        assert cs.last_state.terminated.exit_code == 137
    finally:
        kube_sandbox.clear_faults()


def test_a_node_turning_not_ready_marks_its_pods_unready_until_it_recovers(
        kube_sandbox, core, test_nodes, kube_namespace):
    node = test_nodes.join("flaky", allocatable={})
    name = node.metadata.name
    core.create_namespaced_pod(kube_namespace, pod("onflaky", ["sleep", "60"], test_nodes.selector))
    wait_running_ready(core, kube_namespace, "onflaky")
    kube_sandbox.fault(fault="node-not-ready", node=name)
    try:
        def node_status():
            n = core.read_node(name)
            return {c.type: c.status for c in n.status.conditions}["Ready"], n.spec.taints or []
        ready, taints = wait_for(lambda: node_status()[0] == "Unknown" and node_status())
        assert {(t.key, t.effect) for t in taints} >= {("node.kubernetes.io/unreachable", "NoSchedule")}
        wait_for(lambda: {c.type: c.status for c in core.read_namespaced_pod(
            "onflaky", kube_namespace).status.conditions}["Ready"] == "False")
        assert "NotReady" in kube_sandbox.kubectl("get", "node", name).stdout
    finally:
        kube_sandbox.clear_faults()
    wait_running_ready(core, kube_namespace, "onflaky")
    assert not core.read_node(name).spec.taints
