"""KubeApply against the Kubernetes stand-in (the real REST protocol, the official client)."""

from __future__ import annotations

import pytest
import yaml
from kubernetes import client

from tasks.adapters.kube_apply import FIELD_MANAGER, KubeApply
from tasks.adapters.kubeconfig import api_client_from_kubeconfig
from tasks.errors import ConfigError, RemoteUnavailable, RequestRejected, StageFailed
from tests.fixtures.kube import ALLOWED_IMAGE_PATTERN, wait_for

IMAGE = ALLOWED_IMAGE_PATTERN.replace("*", "tool:1")


def _config_map(ns: str, data: dict) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": ns},
            "data": data}


@pytest.fixture
def kube(kube_client) -> KubeApply:
    return KubeApply(kube_client)


def test_applying_the_same_object_twice_keeps_its_resource_version(kube, kube_namespace):
    first = kube.apply(_config_map(kube_namespace, {"a": "1"}))
    second = kube.apply(_config_map(kube_namespace, {"a": "1"}))
    assert first.uid and second.uid == first.uid
    assert second.resource_version == first.resource_version


def test_apply_is_server_side_apply_owned_by_pdlift(kube, kube_namespace):
    kube.apply(_config_map(kube_namespace, {"a": "1", "b": "2"}))
    kube.apply(_config_map(kube_namespace, {"a": "1"}))  # a field pdlift stops rendering goes away
    obj = kube.get("v1", "ConfigMap", "settings", kube_namespace)
    assert obj["data"] == {"a": "1"}
    managers = {(m["manager"], m["operation"]) for m in obj["metadata"]["managedFields"]}
    assert (FIELD_MANAGER, "Apply") in managers


def test_an_object_the_api_server_refuses_is_request_rejected_with_its_reason(kube, kube_namespace):
    bad = _config_map(kube_namespace, {"a": "1"})
    bad["metadata"]["name"] = "Not_A_DNS_Name"
    with pytest.raises(RequestRejected) as e:
        kube.apply(bad)
    assert e.value.code == "Invalid" and "Not_A_DNS_Name" in str(e.value)


def test_a_kind_pdlift_does_not_know_is_a_config_error_before_any_request():
    offline = KubeApply(client.ApiClient(client.Configuration(host="https://127.0.0.1:9")))
    with pytest.raises(ConfigError, match="StatefulSet"):
        offline.apply({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "x", "namespace": "y"}})


def test_a_crashing_pod_shows_its_back_off_exit_code_events_and_log(kube, kube_namespace):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "crasher", "namespace": kube_namespace},
           "spec": {"terminationGracePeriodSeconds": 1, "containers": [
               {"name": "main", "image": IMAGE, "command": ["sh", "-c", "echo boom-$((1+2)); exit 3"]}]}}
    kube.apply(pod)
    crashed = wait_for(lambda: [p for p in kube.pods(kube_namespace, {}) if p.containers
                                and p.containers[0].waiting_reason == "CrashLoopBackOff"], timeout=20,
                       what="the pod to crash-loop")[0]
    assert crashed.containers[0].exit_code == 3 and crashed.containers[0].restarts >= 1
    assert "BackOff" in {e.reason for e in kube.events(kube_namespace, "crasher")}
    assert "boom-3" in kube.log_tail(kube_namespace, "crasher", "main", lines=5)


def test_deleting_what_is_already_gone_returns_false(kube, kube_namespace):
    kube.apply(_config_map(kube_namespace, {"a": "1"}))
    assert kube.delete("v1", "ConfigMap", "settings", kube_namespace) is True
    assert kube.delete("v1", "ConfigMap", "settings", kube_namespace) is False
    assert kube.get("v1", "ConfigMap", "settings", kube_namespace) is None


def test_a_client_without_valid_credentials_is_stage_failed_naming_the_access_entry(kube_sandbox):
    config = client.Configuration(host=kube_sandbox.server)
    config.ssl_ca_cert = str(kube_sandbox.ca_file)
    config.api_key = {"authorization": "Bearer k8s-aws-v1.not-a-token"}
    with pytest.raises(StageFailed, match="access entry"):
        KubeApply(client.ApiClient(config)).pods("default", {})


def test_an_unreachable_api_server_is_remote_unavailable():
    offline = KubeApply(client.ApiClient(client.Configuration(host="https://127.0.0.1:9")), timeout_s=3)
    with pytest.raises(RemoteUnavailable):
        offline.pods("default", {})


def test_a_kubeconfig_of_another_cluster_is_refused_and_the_right_one_is_used(kube_sandbox, tmp_path):
    doc = yaml.safe_load(kube_sandbox.kubeconfig.read_text())
    with pytest.raises(ConfigError, match="points at cluster"):
        api_client_from_kubeconfig(str(kube_sandbox.kubeconfig), "some-other-cluster")
    doc["clusters"][0]["name"] = doc["contexts"][0]["context"]["cluster"] = \
        f"arn:aws:eks:us-east-2:123456789012:cluster/{kube_sandbox.cluster_name}"
    arn_config = tmp_path / "kubeconfig"
    arn_config.write_text(yaml.safe_dump(doc))
    with api_client_from_kubeconfig(str(arn_config), kube_sandbox.cluster_name) as api:
        assert KubeApply(api).get("v1", "Namespace", "default")["metadata"]["name"] == "default"
