"""The phased wait on scripted pod states: crash loops that never show CrashLoopBackOff (LWS
recreates the group and restart counts reset), and a short Pending that is not a failure."""

from __future__ import annotations

from unittest.mock import create_autospec

import pytest

from tasks.adapters.kube_apply import ContainerState, KubeApply, PodInfo
from tasks.errors import StackFailure
from tasks.stages.deploy_wait import PodGroup, WaitLimits, wait_for_stack
from tasks.stages.clock import Clock

GROUP = [PodGroup("prefill", "ns", {"leaderworkerset.sigs.k8s.io/name": "prefill"}, 1)]
LIMITS = WaitLimits(scheduled_s=60, started_s=60, ready_s=60, router_s=60, unschedulable_grace_s=10, poll_s=1)


def _pod(uid: str, *, node: str = "n1", ready: bool = False, exit_code: int | None = None, finished: str = "",
         unschedulable: str = "") -> PodInfo:
    container = ContainerState("engine", ready, ready, 0, exit_code=exit_code, finished_at=finished)
    return PodInfo("ns", "prefill-0", node, "Running" if node else "Pending", "127.0.0.1", ready, {}, {"http": 8000},
                   (container,) if node else (), unschedulable, False, uid)


def _kube(*snapshots: list[PodInfo]):
    kube = create_autospec(KubeApply, instance=True)
    kube.pods.side_effect = list(snapshots) + [snapshots[-1]] * 100
    kube.events.return_value = []
    kube.log_tail.return_value = "vllm serve: error: unrecognized arguments: --bad\n"
    return kube


def _clock() -> Clock:
    t = [0.0]
    return Clock(sleep=lambda s: t.__setitem__(0, t[0] + s), monotonic=lambda: t[0])


def test_a_group_recreated_after_every_crash_still_fails_as_a_crash_loop():
    kube = _kube([_pod("a", exit_code=2, finished="t1")], [_pod("b")], [_pod("b", exit_code=2, finished="t2")],
                 [_pod("c")], [_pod("c", exit_code=2, finished="t3")])
    with pytest.raises(StackFailure) as failed:
        wait_for_stack(kube, GROUP, lambda pods: [], LIMITS, _clock())
    assert failed.value.reason == "CrashLoopBackOff"
    message = str(failed.value)
    assert "crash-looping (CrashLoopBackOff: 3 crashes)" in message and "unrecognized arguments" in message


def test_pending_shorter_than_the_grace_is_waited_out():
    pending = _pod("a", node="", unschedulable="0/4 nodes are available: 4 Insufficient nvidia.com/gpu.")
    kube = _kube([pending], [pending], [_pod("a", ready=True)])
    took = wait_for_stack(kube, GROUP, lambda pods: [], LIMITS, _clock())
    assert list(took) == ["scheduled", "started", "ready", "router"]


def test_the_router_phase_waits_until_the_router_lists_every_worker():
    answers = [["ns/router lists http://decode as missing"], []]
    kube = _kube([_pod("a", ready=True)])
    took = wait_for_stack(kube, GROUP, lambda pods: answers.pop(0), LIMITS, _clock())
    assert took["router"] > 0 and not answers
