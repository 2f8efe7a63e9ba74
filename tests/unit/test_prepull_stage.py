"""The recreate's prepull step against a Kubernetes port that answers as the kubelet would: what
it refuses, what counts as pulled, and its bound. (The flow test runs it on the stand-in.)"""

from __future__ import annotations

import pytest

from tasks.adapters.kube_apply import ContainerState, PodInfo
from tasks.errors import StageFailed
from tasks.planning.manifests.common import COLOUR_LABEL, ROLE_LABEL, colour_namespace
from tasks.planning.manifests.render import render_stack
from tasks.stages.clock import Clock
from tasks.stages.recreate import prepull
from tests.unit.manifests.helpers import REFERENCE

NODES = ["node-a", "node-b", "node-c", "node-d"]


class Kubelet:
    """Engine pods of the live colour on NODES; prepull pods answer with ``answers[node]``: a
    waiting reason, or an exit code once run."""

    def __init__(self, answers: dict[str, str | int | None]):
        self.answers, self.applied = answers, {}

    def apply(self, obj):
        self.applied[obj["metadata"]["name"]] = obj

    def delete(self, api_version, kind, name, namespace=None):
        self.applied.pop(name, None)
        return True

    def pods(self, namespace, selector):
        if namespace == colour_namespace(REFERENCE, "blue"):
            return [PodInfo(namespace, f"{role}-{i}", node, "Running", "10.0.0.1", True,
                            {COLOUR_LABEL: "blue", ROLE_LABEL: role}, {}, ())
                    for i, (node, role) in enumerate(zip(NODES, ["prefill", "prefill", "decode", "decode"]))]
        out = []
        for name, pod in self.applied.items():
            node = pod["spec"]["nodeName"]
            answer = self.answers.get(node)
            states = tuple(ContainerState(c["name"], False, isinstance(answer, int), 0,
                                          waiting_reason=answer if isinstance(answer, str) else "ContainerCreating"
                                          if answer is None else "",
                                          waiting_message=f"{answer} for {c['image']}" if isinstance(answer, str) else "",
                                          exit_code=answer if isinstance(answer, int) else None)
                           for c in pod["spec"]["containers"])
            out.append(PodInfo(namespace, name, node, "Pending", "", False, pod["metadata"]["labels"], {}, states))
        return out


class Ticking:
    def __init__(self):
        self.t = 0.0

    def clock(self) -> Clock:
        return Clock(sleep=self._sleep, monotonic=lambda: self.t)

    def _sleep(self, s: float) -> None:
        self.t += s


CANDIDATE = render_stack(REFERENCE, "green", "/mnt/nvme/models")


def test_every_node_whose_pull_fails_is_named_with_the_kubelets_reason():
    kube = Kubelet({"node-a": 0, "node-b": "ErrImagePull", "node-c": "ImagePullBackOff", "node-d": "ErrImagePull"})
    with pytest.raises(StageFailed) as refused:
        prepull(REFERENCE, kube, "blue", CANDIDATE, Ticking().clock())
    message = str(refused.value)
    assert "ErrImagePull on node-b, node-d" in message and "ImagePullBackOff on node-c" in message
    assert "node-a" not in message and "blue still serves" in message
    assert not kube.applied  # the pods are deleted on the way out


def test_a_container_that_ran_means_its_image_is_there_whatever_its_exit_code():
    # An image without `true` fails the container (127), but it was pulled and unpacked.
    kube = Kubelet({"node-a": 0, "node-b": 127, "node-c": 1, "node-d": 0})
    assert prepull(REFERENCE, kube, "blue", CANDIDATE, Ticking().clock()) == NODES
    assert not kube.applied


def test_a_pull_still_going_at_the_bound_stops_the_recreate_naming_the_nodes_it_waits_for():
    kube, time = Kubelet({"node-a": 0, "node-b": 0, "node-c": None, "node-d": 0}), Ticking()
    with pytest.raises(StageFailed, match=r"not on node-c within 600 s.*blue still serves"):
        prepull(REFERENCE, kube, "blue", CANDIDATE, time.clock(), bound_s=600)
    assert 600 <= time.t < 620
    assert not kube.applied


def test_a_live_colour_without_engine_pods_is_refused():
    class Empty(Kubelet):
        def pods(self, namespace, selector):
            return []

    with pytest.raises(StageFailed, match="no engine pod"):
        prepull(REFERENCE, Empty({}), "blue", CANDIDATE, Ticking().clock())
