"""The official kubernetes client and the pinned kubectl work against the stand-in unchanged."""

from __future__ import annotations

import json
import subprocess
import threading
import time

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from tests.fixtures.kube import KUBECTL, wait_for

MANIFEST = """
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: {ns}
  labels: {{app: demo, tier: config}}
data:
  mode: fast
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: {ns}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      containers:
      - name: web
        image: registry.sandbox.test/web:1
        command: ["sleep", "120"]
"""


def test_the_python_client_lists_namespaces_and_nodes(kube_client):
    core = client.CoreV1Api(kube_client)
    assert "default" in {n.metadata.name for n in core.list_namespace().items}
    nodes = core.list_node().items
    system = next(n for n in nodes if n.metadata.name == "sandbox-system")
    assert any(c.type == "Ready" and c.status == "True" for c in system.status.conditions)


def test_kubectl_gets_nodes_through_the_eks_token_plugin(kube_sandbox):
    out = kube_sandbox.kubectl("get", "nodes", "-o", "wide").stdout
    assert "sandbox-system" in out and "Ready" in out
    assert f"127.{kube_sandbox.octet}.0.10" in out  # the system node address this session set


def test_kubectl_server_side_apply_twice_is_a_no_op(kube_sandbox, kube_namespace):
    # replicas 0: no pods, so no status updates move the resourceVersion under the test
    manifest = MANIFEST.format(ns=kube_namespace).replace("replicas: 1", "replicas: 0")
    first = kube_sandbox.kubectl("apply", "--server-side", "-f", "-", input=manifest).stdout
    assert "configmap/settings serverside-applied" in first
    assert "deployment.apps/web serverside-applied" in first
    kube_sandbox.kubectl("wait", "-n", kube_namespace, "deployment/web",
                         "--for=jsonpath={.status.observedGeneration}=1", "--timeout=20s")
    before = json.loads(kube_sandbox.kubectl("get", "configmap,deployment", "-n", kube_namespace,
                                             "-o", "json").stdout)
    kube_sandbox.kubectl("apply", "--server-side", "-f", "-", input=manifest)
    after = json.loads(kube_sandbox.kubectl("get", "configmap,deployment", "-n", kube_namespace,
                                            "-o", "json", "--show-managed-fields").stdout)
    versions = lambda doc: {i["metadata"]["name"]: i["metadata"]["resourceVersion"]
                            for i in doc["items"]}
    assert versions(before) == versions(after)
    cm = next(i for i in after["items"] if i["kind"] == "ConfigMap")
    assert [m["manager"] for m in cm["metadata"]["managedFields"]] == ["kubectl"]
    assert cm["metadata"]["managedFields"][0]["operation"] == "Apply"


def test_a_second_field_manager_changing_an_owned_field_gets_409_unless_it_forces(
        kube_sandbox, kube_client, kube_namespace):
    kube_sandbox.kubectl("apply", "--server-side", "-f", "-",
                         input=MANIFEST.format(ns=kube_namespace))
    core = client.CoreV1Api(kube_client)
    change = {"apiVersion": "v1", "kind": "ConfigMap",
              "metadata": {"name": "settings", "namespace": kube_namespace},
              "data": {"mode": "slow"}}
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_config_map("settings", kube_namespace, change,
                                         field_manager="pdlift", _content_type="application/apply-patch+yaml")
    assert err.value.status == 409
    status = json.loads(err.value.body)
    assert status["kind"] == "Status" and status["reason"] == "Conflict"
    assert 'conflict with "kubectl"' in status["message"] and ".data.mode" in status["message"]
    assert status["details"]["causes"][0]["field"] == ".data.mode"

    forced = core.patch_namespaced_config_map("settings", kube_namespace, change, field_manager="pdlift",
                                              force=True, _content_type="application/apply-patch+yaml")
    assert forced.data["mode"] == "slow"
    owners = {m.manager: m.fields_v1 for m in forced.metadata.managed_fields}
    assert "f:mode" in owners["pdlift"]["f:data"]
    assert "f:data" not in owners["kubectl"]


def test_applying_the_same_value_as_another_manager_shares_ownership_without_conflict(
        kube_client, kube_namespace):
    core = client.CoreV1Api(kube_client)
    cm = {"apiVersion": "v1", "kind": "ConfigMap",
          "metadata": {"name": "shared", "namespace": kube_namespace}, "data": {"k": "v"}}
    for manager in ("one", "two"):
        core.patch_namespaced_config_map("shared", kube_namespace, cm, field_manager=manager,
                                         _content_type="application/apply-patch+yaml")
    managers = {m.manager for m in core.read_namespaced_config_map("shared", kube_namespace)
                .metadata.managed_fields}
    assert managers == {"one", "two"}


def test_dropping_a_field_from_the_applied_configuration_removes_it(kube_client, kube_namespace):
    core = client.CoreV1Api(kube_client)
    cm = {"apiVersion": "v1", "kind": "ConfigMap",
          "metadata": {"name": "trim", "namespace": kube_namespace}, "data": {"a": "1", "b": "2"}}
    core.patch_namespaced_config_map("trim", kube_namespace, cm, field_manager="m",
                                     _content_type="application/apply-patch+yaml")
    cm["data"] = {"a": "1"}
    result = core.patch_namespaced_config_map("trim", kube_namespace, cm, field_manager="m",
                                              _content_type="application/apply-patch+yaml")
    assert result.data == {"a": "1"}


def test_errors_are_status_objects_with_the_real_reasons(kube_client, kube_namespace):
    core = client.CoreV1Api(kube_client)
    with pytest.raises(ApiException) as missing:
        core.read_namespaced_config_map("absent", kube_namespace)
    assert missing.value.status == 404 and json.loads(missing.value.body)["reason"] == "NotFound"
    body = {"metadata": {"name": "dup"}, "data": {}}
    core.create_namespaced_config_map(kube_namespace, body)
    with pytest.raises(ApiException) as dup:
        core.create_namespaced_config_map(kube_namespace, body)
    assert dup.value.status == 409 and json.loads(dup.value.body)["reason"] == "AlreadyExists"
    with pytest.raises(ApiException) as bad:
        core.create_namespaced_pod(kube_namespace, {"metadata": {"name": "Bad_Name"},
                                                    "spec": {"containers": [{"name": "c"}]}})
    status = json.loads(bad.value.body)
    assert bad.value.status == 422 and status["reason"] == "Invalid"
    fields = {c["field"] for c in status["details"]["causes"]}
    assert {"metadata.name", "spec.containers[0].image"} <= fields


def test_a_replace_with_a_stale_resource_version_conflicts(kube_client, kube_namespace):
    core = client.CoreV1Api(kube_client)
    cm = core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "cas"}, "data": {"n": "1"}})
    cm.data = {"n": "2"}
    core.replace_namespaced_config_map("cas", kube_namespace, cm)
    cm.data = {"n": "3"}  # still carries the old resourceVersion
    with pytest.raises(ApiException) as err:
        core.replace_namespaced_config_map("cas", kube_namespace, cm)
    assert err.value.status == 409 and "has been modified" in json.loads(err.value.body)["message"]


def test_label_selectors_filter_lists_equality_and_set_based(kube_client, kube_namespace):
    core = client.CoreV1Api(kube_client)
    for name, labels in [("a", {"role": "prefill", "gen": "1"}), ("b", {"role": "decode"}),
                         ("c", {"role": "router", "gen": "2"})]:
        core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": name, "labels": labels}})

    def names(selector):
        return sorted(i.metadata.name for i in core.list_namespaced_config_map(
            kube_namespace, label_selector=selector).items)

    assert names("role=prefill") == ["a"]
    assert names("role!=prefill") == ["b", "c"]
    assert names("role in (prefill, decode)") == ["a", "b"]
    assert names("role notin (router),gen") == ["a"]
    assert names("!gen") == ["b"]
    by_field = core.list_namespaced_config_map(kube_namespace, field_selector="metadata.name=c").items
    assert [i.metadata.name for i in by_field] == ["c"]


def test_strategic_merge_patch_merges_containers_by_name_and_merge_patch_replaces_lists(
        kube_client, kube_namespace):
    apps = client.AppsV1Api(kube_client)
    apps.create_namespaced_deployment(kube_namespace, {
        "metadata": {"name": "two"},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "two"}},
                 "template": {"metadata": {"labels": {"app": "two"}}, "spec": {"containers": [
                     {"name": "a", "image": "registry.sandbox.test/a:1"},
                     {"name": "b", "image": "registry.sandbox.test/b:1"}]}}}})
    patched = apps.patch_namespaced_deployment("two", kube_namespace, {"spec": {"template": {"spec": {
        "containers": [{"name": "b", "image": "registry.sandbox.test/b:2"}]}}}})
    images = {c.name: c.image for c in patched.spec.template.spec.containers}
    assert images == {"a": "registry.sandbox.test/a:1", "b": "registry.sandbox.test/b:2"}
    assert patched.metadata.generation == 2
    merged = apps.patch_namespaced_deployment(
        "two", kube_namespace, {"metadata": {"labels": {"x": "y"}}},
        _content_type="application/merge-patch+json")
    assert merged.metadata.labels == {"x": "y"} and merged.metadata.generation == 2


def test_the_python_client_watches_changes_from_a_resource_version(kube_client, kube_namespace):
    core = client.CoreV1Api(kube_client)
    rv = core.list_namespaced_config_map(kube_namespace).metadata.resource_version

    def change():
        time.sleep(0.3)
        core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "w"}, "data": {"v": "1"}})
        core.patch_namespaced_config_map("w", kube_namespace, {"data": {"v": "2"}})
        core.delete_namespaced_config_map("w", kube_namespace)

    t = threading.Thread(target=change)
    t.start()
    seen = []
    for event in watch.Watch().stream(core.list_namespaced_config_map, kube_namespace,
                                      resource_version=rv, timeout_seconds=5):
        seen.append((event["type"], event["object"].metadata.name))
        if event["type"] == "DELETED":
            break
    t.join()
    assert seen == [("ADDED", "w"), ("MODIFIED", "w"), ("DELETED", "w")]


def test_kubectl_watch_streams_new_objects(kube_sandbox, kube_client, kube_namespace):
    core = client.CoreV1Api(kube_client)
    core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "listed"}})
    proc = subprocess.Popen([str(KUBECTL), "get", "configmaps", "-n", kube_namespace, "--watch",
                             "-o", "name"], env=kube_sandbox.env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        # kubectl lists first, then watches from that list's resourceVersion: once the object made
        # before it started shows up, the list is done, and what is created now comes by the watch.
        wait_for(lambda: "configmap/listed\n" in lines, timeout=20, what="kubectl's initial list")
        core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "watched"}})
        wait_for(lambda: "configmap/watched\n" in lines, timeout=10, what="kubectl watch output")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_kubectl_delete_removes_what_apply_made(kube_sandbox, kube_namespace):
    manifest = MANIFEST.format(ns=kube_namespace)
    kube_sandbox.kubectl("apply", "--server-side", "-f", "-", input=manifest)
    kube_sandbox.kubectl("delete", "-f", "-", input=manifest, timeout=60)
    out = kube_sandbox.kubectl("get", "configmaps,deployments", "-n", kube_namespace, "-o", "name").stdout
    assert "settings" not in out and "deployment" not in out


def test_status_is_written_only_through_the_status_subresource(kube_client, kube_namespace):
    core = client.CoreV1Api(kube_client)
    core.create_namespaced_service(kube_namespace, {"metadata": {"name": "lb"},
                                                    "spec": {"ports": [{"port": 80}]}})
    lb = {"status": {"loadBalancer": {"ingress": [{"hostname": "lb.example"}]}}}
    ignored = core.patch_namespaced_service("lb", kube_namespace, lb)
    assert not ignored.status.load_balancer.ingress
    written = core.patch_namespaced_service_status("lb", kube_namespace, {
        **lb, "spec": {"ports": [{"port": 81}]}})
    assert written.status.load_balancer.ingress[0].hostname == "lb.example"
    assert [p.port for p in written.spec.ports] == [80]
