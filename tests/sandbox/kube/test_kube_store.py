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
