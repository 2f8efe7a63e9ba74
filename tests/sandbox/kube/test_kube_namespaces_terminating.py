"""A deleted namespace stays listed, Terminating, until the namespace controller has emptied it
(Kubernetes: "Namespaces" concept page, the namespace lifecycle). pdlift's teardown and sweep
count it as released already, not as something still to release."""

from __future__ import annotations

import uuid

from tasks.adapters.kube_nodes import KubeNodes
from tests.sandbox.kube.conftest import pod, wait_running_ready


def test_a_terminating_namespace_is_not_listed_as_one_to_release(kube_client, core, test_nodes):
    test_nodes.join("ns")
    label = "pdlift.io/deployment=t" + uuid.uuid4().hex[:8]
    key, value = label.split("=")
    name = value + "-blue"
    core.create_namespace({"metadata": {"name": name, "labels": {key: value}}})
    # A pod that ignores SIGTERM keeps the namespace Terminating for its grace period.
    core.create_namespaced_pod(name, pod("slow", ["sh", "-c", "trap '' TERM; sleep 60"],
                                         node_selector=test_nodes.selector, terminationGracePeriodSeconds=5))
    wait_running_ready(core, name, "slow")
    nodes = KubeNodes(kube_client)
    assert nodes.namespaces(label) == [name]

    nodes.delete_namespace(name)
    listed = core.read_namespace(name)  # still there, being emptied
    assert listed.status.phase == "Terminating" and listed.metadata.deletion_timestamp
    assert nodes.namespaces(label) == []
