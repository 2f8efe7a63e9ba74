"""Answers the stand-in gives as a real API server does, pinned after scripts/bench/kube_contract.py
compared the two (a real kube-apiserver v1.20.2; sandbox/kube/README.md, "Against a real API
server"): conflict messages, the log of an unscheduled pod, the cause of a refusal in a
terminating namespace, the plain-text 404 of a group nobody serves, and the LWS table columns."""

from __future__ import annotations

import uuid

import pytest

from tests.fixtures.kube import wait_for

APPLY = {"Content-Type": "application/apply-patch+yaml"}


@pytest.fixture
def token(kube_sandbox):
    return kube_sandbox.token()


def _cm(ns: str, data: dict) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": ns}, "data": data}


def _apply(kube_sandbox, token, ns: str, manager: str, data: dict, force: bool = False):
    path = f"/api/v1/namespaces/{ns}/configmaps/cm?fieldManager={manager}" + ("&force=true" if force else "")
    return kube_sandbox.raw("PATCH", path, token=token, body=_cm(ns, data), headers=APPLY)


def test_a_conflict_with_an_apply_manager_names_it_without_version_or_time(kube_sandbox, token, kube_namespace):
    assert _apply(kube_sandbox, token, kube_namespace, "first", {"k": "v"})[0] in (200, 201)
    status, body = _apply(kube_sandbox, token, kube_namespace, "second", {"k": "w"})
    assert status == 409 and body["reason"] == "Conflict"
    assert body["message"] == 'Apply failed with 1 conflict: conflict with "first": .data.k'
    assert body["details"]["causes"] == [{"reason": "FieldManagerConflict", "message": 'conflict with "first"',
                                          "field": ".data.k"}]


def test_a_conflict_with_an_update_manager_names_its_api_version(kube_sandbox, token, kube_namespace):
    status, _ = kube_sandbox.raw("POST", f"/api/v1/namespaces/{kube_namespace}/configmaps?fieldManager=maker",
                                 token=token, body=_cm(kube_namespace, {"k": "v"}))
    assert status == 201
    status, body = _apply(kube_sandbox, token, kube_namespace, "pdlift", {"k": "w"})
    assert status == 409
    assert body["message"] == 'Apply failed with 1 conflict: conflict with "maker" using v1: .data.k'


def test_several_conflicts_are_grouped_by_manager(kube_sandbox, token, kube_namespace):
    assert _apply(kube_sandbox, token, kube_namespace, "first", {"a": "1", "b": "1"})[0] in (200, 201)
    status, body = _apply(kube_sandbox, token, kube_namespace, "second", {"a": "2", "b": "2"})
    assert status == 409
    assert body["message"] == 'Apply failed with 2 conflicts: conflicts with "first":\n- .data.a\n- .data.b'


def test_the_log_of_a_pod_not_bound_to_a_node_is_empty_with_204(kube_sandbox, token, kube_namespace, core):
    core.create_namespaced_pod(kube_namespace, {"metadata": {"name": "nowhere"}, "spec": {
        "nodeSelector": {"pdlift.io/test": "no-such-node-" + uuid.uuid4().hex[:6]},
        "containers": [{"name": "main", "image": "registry.sandbox.test/tool:1"}]}})
    path = f"/api/v1/namespaces/{kube_namespace}/pods/nowhere/log"
    assert kube_sandbox.raw("GET", path, token=token) == (204, "")
    status, body = kube_sandbox.raw("GET", path + "?container=other", token=token)
    assert status == 400 and "container other is not valid" in body["message"]


def test_creating_in_a_terminating_namespace_is_refused_with_a_namespace_terminating_cause(
        kube_sandbox, token, core, test_nodes):
    from tests.sandbox.kube.conftest import pod, wait_running_ready

    test_nodes.join("term")
    ns = "t-" + uuid.uuid4().hex[:8]
    core.create_namespace({"metadata": {"name": ns}})
    # A pod that ignores SIGTERM keeps the namespace Terminating for its grace period.
    core.create_namespaced_pod(ns, pod("slow", ["sh", "-c", "trap '' TERM; sleep 60"],
                                       node_selector=test_nodes.selector, terminationGracePeriodSeconds=5))
    wait_running_ready(core, ns, "slow")
    core.delete_namespace(ns)
    status, body = kube_sandbox.raw("POST", f"/api/v1/namespaces/{ns}/configmaps", token=token,
                                    body={"metadata": {"name": "late"}})
    assert status == 403 and body["reason"] == "Forbidden"
    assert body["details"]["causes"] == [{"reason": "NamespaceTerminating",
                                          "message": f"namespace {ns} is being terminated",
                                          "field": "metadata.namespace"}]
    wait_for(lambda: kube_sandbox.raw("GET", f"/api/v1/namespaces/{ns}", token=token)[0] == 404, timeout=30,
             what="the namespace to go")


@pytest.mark.parametrize("path", ["/apis/leaderworkerset.example/v1/namespaces/default/leaderworkersets/x",
                                  "/apis/leaderworkerset.x-k8s.io/v9/namespaces/default/leaderworkersets/x",
                                  "/apis/leaderworkerset.example"])
def test_a_group_or_crd_version_nobody_serves_is_a_plain_text_404(kube_sandbox, token, path):
    assert kube_sandbox.raw("GET", path, token=token) == (404, "404 page not found\n")


def test_an_unknown_resource_of_a_served_group_is_a_not_found_status(kube_sandbox, token):
    status, body = kube_sandbox.raw("GET", "/apis/apps/v1/namespaces/default/widgets/x", token=token)
    assert status == 404 and body["kind"] == "Status"
    assert body["message"] == "the server could not find the requested resource"


def test_leaderworkersets_list_as_a_table_with_the_crd_printer_columns(kube_sandbox, token, kube_namespace):
    lws = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
           "metadata": {"name": "cols", "namespace": kube_namespace},
           "spec": {"replicas": 0, "leaderWorkerTemplate": {"size": 1, "workerTemplate": {"spec": {
               "containers": [{"name": "main", "image": "registry.sandbox.test/tool:1"}]}}}}}
    path = f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{kube_namespace}/leaderworkersets"
    assert kube_sandbox.raw("POST", path, token=token, body=lws)[0] == 201
    status, table = kube_sandbox.raw("GET", path, token=token,
                                     headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"})
    assert status == 200 and table["kind"] == "Table"
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Ready", "Desired", "Up-to-date", "Age"]
    assert table["rows"][0]["cells"][:3] == ["cols", 0, 0] or table["rows"][0]["cells"][:3] == ["cols", None, 0]


def test_a_refused_request_body_does_not_spill_into_the_next_request_on_the_connection(kube_sandbox, token):
    import http.client
    import json
    import ssl
    from urllib.parse import urlsplit

    url = urlsplit(kube_sandbox.server)
    conn = http.client.HTTPSConnection(url.hostname, url.port, timeout=10,
                                       context=ssl.create_default_context(cafile=str(kube_sandbox.ca_file)))
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/apply-patch+yaml"}
    body = json.dumps({"apiVersion": "leaderworkerset.example/v1", "kind": "LeaderWorkerSet",
                       "metadata": {"name": "x"}, "spec": {"padding": "x" * 2000}})
    try:
        conn.request("PATCH", "/apis/leaderworkerset.example/v1/namespaces/default/leaderworkersets/x"
                     "?fieldManager=pdlift", body=body, headers=headers)
        first = conn.getresponse()
        assert (first.status, first.read()) == (404, b"404 page not found\n")
        conn.request("GET", "/api/v1/namespaces/default", headers={"Authorization": f"Bearer {token}"})
        second = conn.getresponse()
        assert second.status == 200 and json.loads(second.read())["metadata"]["name"] == "default"
    finally:
        conn.close()


def test_a_service_name_must_be_a_dns_1035_label(kube_sandbox, token, kube_namespace):
    svc = {"metadata": {"name": "1st-router"}, "spec": {"ports": [{"port": 80}]}}
    status, body = kube_sandbox.raw("POST", f"/api/v1/namespaces/{kube_namespace}/services", token=token, body=svc)
    assert status == 422 and body["details"]["causes"][0]["field"] == "metadata.name"
    assert "DNS-1035 label" in body["details"]["causes"][0]["message"]
