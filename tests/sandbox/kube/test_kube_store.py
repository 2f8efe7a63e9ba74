"""The kube stand-in's object store: what ``view`` hands the control loop (the stored objects
themselves, no copies) stays as it was whatever the API does next, and changing what ``list`` or
``get`` returned changes nothing stored."""

from __future__ import annotations

import copy

from sandbox.kube import resources
from sandbox.kube.store import Store

PODS = resources.lookup("", "v1", "pods")


def _pod(name: str, phase: str = "Pending") -> dict:
    return {"metadata": {"name": name, "namespace": "ns", "labels": {"app": "x"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]}, "status": {"phase": phase}}


def test_a_viewed_object_is_never_changed_by_a_later_update_or_delete():
    store = Store()
    store.create(PODS, _pod("a"))
    store.create(PODS, _pod("b"))
    seen = store.view(PODS)
    before = copy.deepcopy(seen)
    assert [p["metadata"]["name"] for p in seen] == ["a", "b"]

    store.update(PODS, {**store.get(PODS, "ns", "a"), "status": {"phase": "Running"}})
    deleted = store.delete(PODS, "ns", "b")

    assert seen == before  # the view is a moment's: neither the update nor the delete reached it
    assert deleted["metadata"]["resourceVersion"] == str(store.resource_version)  # the deletion's version
    assert [(p["metadata"]["name"], p["status"]["phase"]) for p in store.view(PODS)] == [("a", "Running")]
    (event,) = [e for e in store.events_after(0) if e.type == "DELETED"]
    assert event.obj["metadata"]["resourceVersion"] == deleted["metadata"]["resourceVersion"]


def test_what_list_and_get_return_are_copies():
    store = Store()
    store.create(PODS, _pod("a"))
    listed, got = store.list(PODS)[0], store.get(PODS, "ns", "a")
    listed["metadata"]["labels"]["app"] = "changed"
    got["status"]["phase"] = "Failed"
    assert store.view(PODS)[0]["metadata"]["labels"] == {"app": "x"}
    assert store.view(PODS)[0]["status"] == {"phase": "Pending"}


def test_a_view_is_of_one_namespace_when_asked_in_name_order():
    store = Store()
    for ns, name in (("b", "z"), ("a", "y"), ("b", "x")):
        store.create(PODS, {**_pod(name), "metadata": {"name": name, "namespace": ns}})
    assert [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in store.view(PODS, "b")] == \
        [("b", "x"), ("b", "z")]
    assert len(store.view(PODS)) == 3


def test_the_control_loop_changes_no_object_it_reads_in_place(tmp_path):
    """The control loop reads views (the stored objects themselves): ticks over a Deployment, its
    pods (on the system node, their image refused), a pod that fits no node, a Service and its
    Endpoints write only through the API, so every object stored, the ones a tick was shown
    included, is still what the store logged when it was written (its watch event)."""
    from sandbox.kube.config import Settings
    from sandbox.kube.server import KubeApp
    from tests.fixtures import loopback

    app = KubeApp(Settings(state_dir=tmp_path, system_node_address=f"127.{loopback.octet(64, 191)}.0.10",
                           allowed_images=["registry.sandbox.test/*"]))
    api = app.api
    kind = {k: resources.lookup(g, "v1", k) for g, k in (("", "namespaces"), ("apps", "deployments"),
                                                          ("", "services"), ("", "pods"), ("", "endpoints"))}
    api.create(kind["namespaces"], None, {"metadata": {"name": "ns"}}, "test")
    api.create(kind["deployments"], "ns", {"metadata": {"name": "web"}, "spec": {
        "replicas": 2, "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}},
                     "spec": {"containers": [{"name": "c", "image": "elsewhere.example/refused:1"}]}}}}, "test")
    api.create(kind["pods"], "ns", {**_pod("stuck"), "spec": {
        "nodeSelector": {"no-such": "node"}, "containers": [{"name": "c", "image": "registry.sandbox.test/t:1"}]}},
        "test")
    api.create(kind["services"], "ns", {"metadata": {"name": "web"}, "spec": {
        "selector": {"app": "web"}, "ports": [{"port": 80}]}}, "test")
    app.runtime.nodes.sync()
    shown: list[tuple[str, dict]] = []
    try:
        for _ in range(6):
            shown += [(rt.key, obj) for rt in resources.RESOURCES for obj in api.store.view(rt)]
            app.runtime.tick()
    finally:
        app.runtime.kubelet.shutdown()
    shown += [(rt.key, obj) for rt in resources.RESOURCES for obj in api.store.view(rt)]
    written = {(e.rkey, e.obj["metadata"]["resourceVersion"]): e.obj
               for e in api.store.events_after(0) if e.type != "DELETED"}
    changed = [(rkey, obj["metadata"]["name"]) for rkey, obj in shown
               if obj != written[(rkey, obj["metadata"]["resourceVersion"])]]
    assert changed == []
    # the ticks did the work: the Deployment's pods bound and refused, the other unschedulable,
    # the Service's Endpoints listing the two (not ready)
    pods = {p["metadata"]["name"]: p for p in api.store.list(kind["pods"], "ns")}
    assert len(pods) == 3 and all(p["status"].get("podIP") for n, p in pods.items() if n != "stuck"), pods
    assert [c["reason"] for c in pods["stuck"]["status"]["conditions"]] == ["Unschedulable"]
    (endpoints,) = api.store.list(kind["endpoints"], "ns")
    assert len(endpoints["subsets"][0]["notReadyAddresses"]) == 2
