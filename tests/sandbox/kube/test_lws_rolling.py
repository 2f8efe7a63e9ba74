"""A LeaderWorkerSet's template change rolls out as the LWS controller does it
(kubernetes-sigs/lws pkg/controllers/leaderworkerset_controller.go, ``rollingUpdatePartition``
and ``updateConditions``; site docs concepts/rollout-strategy): the highest group first, at most
maxUnavailable groups down at once, the next only once the updated ones are Ready, never below
``rollingUpdateConfiguration.partition``."""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from sandbox.kube.lws import GroupState, rolling_partition, scaled
from tests.fixtures.kube import wait_for
from tests.sandbox.kube.conftest import IMAGE

LWS_API = ("leaderworkerset.x-k8s.io", "v1")
REV = "leaderworkerset.sigs.k8s.io/template-revision-hash"
OLD, NEW, DOWN = GroupState(True, False), GroupState(True, True), GroupState(False, True)
BROKEN = GroupState(False, False)


@pytest.mark.parametrize("states, step, current, wanted", [
    ([OLD, OLD, OLD, OLD], 1, 4, 3),        # the last group first
    ([OLD, OLD, OLD, OLD], 2, 4, 2),        # maxUnavailable 2: two at once
    ([OLD, OLD, OLD, DOWN], 1, 3, 3),       # the updated group not Ready yet: wait
    ([OLD, OLD, OLD, NEW], 1, 3, 2),        # Ready: the next one
    ([OLD, NEW, NEW, NEW], 1, 1, 0),
    ([BROKEN, OLD, OLD, OLD], 1, 4, 4),     # maxUnavailable spent on a broken group: no update
    ([OLD, OLD, BROKEN, BROKEN], 1, 4, 3),  # an unready last group is updated at once: it serves nothing
    ([OLD, OLD, OLD, OLD], 1, 1, 1),        # the partition only moves down
    ([OLD], 1, 1, 0),                       # one group: replaced whole (maxSurge 0)
])
def test_the_partition_steps_down_as_lws_rolling_update_partition(states, step, current, wanted):
    assert rolling_partition(states, len(states), step, current) == wanted


def test_percentages_scale_as_intstr_does():
    assert scaled("25%", 4, False) == 1 and scaled("30%", 4, False) == 1 and scaled("30%", 4, True) == 2
    assert scaled(2, 4, False) == 2


def _lws(name: str, selector: dict, version: str, partition: int | None = None) -> dict:
    template = {"spec": {"nodeSelector": selector, "terminationGracePeriodSeconds": 1,
                         "containers": [{"name": "engine", "image": IMAGE, "command": ["sleep", "300"],
                                         "env": [{"name": "VERSION", "value": version}],
                                         "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}
    rollout = {"maxUnavailable": 1, "maxSurge": 0, **({"partition": partition} if partition is not None else {})}
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": name},
            "spec": {"replicas": 2, "rolloutStrategy": {"type": "RollingUpdate",
                                                        "rollingUpdateConfiguration": rollout},
                     "leaderWorkerTemplate": {"size": 1, "workerTemplate": template}}}


def _groups(core, ns: str, name: str) -> dict[int, tuple[str, bool]]:
    """Group index -> (template hash, running and Ready) of its pod, terminating pods left out."""
    out = {}
    for p in core.list_namespaced_pod(ns, label_selector=f"leaderworkerset.sigs.k8s.io/name={name}").items:
        if p.metadata.deletion_timestamp:
            continue
        ready = p.status.phase == "Running" and any(
            c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
        out[int(p.metadata.labels["leaderworkerset.sigs.k8s.io/group-index"])] = (p.metadata.labels[REV], ready)
    return out


def _status(custom, ns: str, name: str) -> dict:
    return custom.get_namespaced_custom_object(*LWS_API, ns, "leaderworkersets", name).get("status") or {}


def _conditions(status: dict) -> dict[str, str]:
    return {c["type"]: c["status"] for c in status.get("conditions") or []}


def _start(kube_client, core, test_nodes, ns: str, name: str, partition: int | None = None):
    test_nodes.join(f"{name}0")
    test_nodes.join(f"{name}1")
    custom = client.CustomObjectsApi(kube_client)
    custom.create_namespaced_custom_object(*LWS_API, ns, "leaderworkersets",
                                           _lws(name, test_nodes.selector, "1", partition))
    wait_for(lambda: len(g := _groups(core, ns, name)) == 2 and all(r for _, r in g.values()),
             timeout=60, what="both groups Ready")
    old = _groups(core, ns, name)[0][0]
    wait_for(lambda: _conditions(_status(custom, ns, name)).get("Available") == "True", what="Available")
    patch = {"spec": _lws(name, test_nodes.selector, "2", partition)["spec"]}
    custom.patch_namespaced_custom_object(*LWS_API, ns, "leaderworkersets", name, patch)
    return custom, old


def test_a_template_change_replaces_the_last_group_first_and_keeps_one_serving_throughout(
        kube_client, core, test_nodes, kube_namespace):
    ns, name = kube_namespace, "decode"
    custom, old = _start(kube_client, core, test_nodes, ns, name)
    seen, statuses = [], []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        groups, status = _groups(core, ns, name), _status(custom, ns, name)
        seen.append(groups)
        statuses.append(status)
        if len(groups) == 2 and all(rev != old and ready for rev, ready in groups.values()) \
                and _conditions(status).get("Available") == "True":
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the rollout did not finish: {seen[-1]}, {statuses[-1]}")
    # Never both groups down at once (maxUnavailable 1, maxSurge 0): one Ready group in every look.
    assert all(any(ready for _, ready in g.values()) for g in seen), seen
    # Group 1 first: a look with it updated and group 0 on the old template, none the other way.
    assert any(g.get(1, ("", False))[0] != old and g.get(0, ("", False))[0] == old for g in seen)
    assert not any(g.get(0, (old, False))[0] != old and g.get(1, ("", False))[0] == old for g in seen)
    assert any(_conditions(s).get("UpdateInProgress") == "True" and _conditions(s).get("Available") == "False"
               for s in statuses)
    done = statuses[-1]
    assert done["updatedReplicas"] == 2 and done["readyReplicas"] == 2
    assert _conditions(done) == {"Available": "True", "Progressing": "False", "UpdateInProgress": "False"}


def test_groups_below_the_partition_keep_the_old_template(kube_client, core, test_nodes, kube_namespace):
    ns, name = kube_namespace, "prefill"
    custom, old = _start(kube_client, core, test_nodes, ns, name, partition=1)
    wait_for(lambda: (g := _groups(core, ns, name)).get(1, (old, False))[0] != old and g[1][1],
             timeout=60, what="group 1 Ready on the new template")
    time.sleep(3.0)  # many controller passes: group 0 is left alone
    groups = _groups(core, ns, name)
    assert groups[0][0] == old and groups[1][0] != old
    status = wait_for(lambda: (s := _status(custom, ns, name)).get("updatedReplicas") == 1
                      and _conditions(s).get("Available") == "True" and s, what="Available at partition 1")
    assert status["readyReplicas"] == 2
