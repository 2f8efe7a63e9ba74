"""The pinned kubectl (1.37) creates, applies, gets, deletes and reads logs against the stand-in.

kubectl's typed clients send protobuf (``kubectl create namespace`` included) and never retry as
JSON after a 415, so the stand-in decodes protobuf as a real apiserver does (sandbox/kube/protobuf.py).
"""

from __future__ import annotations

import base64
import json
import uuid

import pytest
from kubernetes import client

from sandbox.kube import errors, protobuf
from tests.fixtures.kube import wait_for

IMAGE = "registry.sandbox.test/tool:1"

APPLIED = """
apiVersion: v1
kind: ConfigMap
metadata: {{name: {name}, namespace: {ns}, labels: {{how: {how}}}}}
data: {{mode: fast}}
"""


def _json(kube_sandbox, *args):
    return json.loads(kube_sandbox.kubectl(*args, "-o", "json").stdout)


def test_kubectl_create_namespace_secret_deployment_and_run_decode_from_protobuf_and_apply_get_delete_logs_work(
        kube_sandbox, kube_client):
    ns = "kp-" + uuid.uuid4().hex[:6]
    try:
        kube_sandbox.kubectl("create", "namespace", ns)  # "couldn't decode the request body" before
        kube_sandbox.kubectl("create", "secret", "generic", "sec", "-n", ns, "--from-literal=token=s3cr3t")
        kube_sandbox.kubectl("create", "deployment", "web", "-n", ns, f"--image={IMAGE}", "--replicas=0",
                             "--port=8080")
        kube_sandbox.kubectl("run", "hello", "-n", ns, f"--image={IMAGE}", "--restart=Never", "--env=GREETING=hi",
                             "--labels=app=hello,tier=probe", "--command", "--", "sh", "-c", "echo $GREETING there")

        listed = _json(kube_sandbox, "get", f"namespace/{ns}", "secret/sec", "deployment/web", "pod/hello", "-n", ns)
        got = {i["kind"]: i for i in listed["items"]}
        assert got["Namespace"]["status"]["phase"] == "Active"
        assert base64.b64decode(got["Secret"]["data"]["token"]) == b"s3cr3t"  # []byte: base64 in JSON
        web = got["Deployment"]
        assert web["spec"]["replicas"] == 0  # a pointer's zero survives (omitempty drops only non-pointers)
        (container,) = web["spec"]["template"]["spec"]["containers"]
        assert container["image"] == IMAGE and container["ports"] == [{"containerPort": 8080, "protocol": "TCP"}]
        pod = got["Pod"]
        assert pod["metadata"]["labels"] == {"app": "hello", "tier": "probe"}
        assert pod["spec"]["containers"][0]["env"] == [{"name": "GREETING", "value": "hi"}]
        assert pod["spec"]["restartPolicy"] == "Never"
        wait_for(lambda: "hi there" in kube_sandbox.kubectl("logs", "hello", "-n", ns, check=False).stdout,
                 what="kubectl logs of the pod kubectl run made")

        for how, flags in (("client", ()), ("server", ("--server-side",))):
            out = kube_sandbox.kubectl("apply", *flags, "-f", "-",
                                       input=APPLIED.format(name=f"applied-{how}", ns=ns, how=how)).stdout
            assert f"configmap/applied-{how}" in out
        core = client.CoreV1Api(kube_client)  # checked through the Python client: one kubectl run is ~0.6 s
        assert {c.metadata.name: c.metadata.labels for c in core.list_namespaced_config_map(ns).items} == {
            "applied-client": {"how": "client"}, "applied-server": {"how": "server"}}
        out = kube_sandbox.kubectl("delete", "configmap", "applied-client", "applied-server", "-n", ns).stdout
        assert "configmap \"applied-server\" deleted" in out
        assert not core.list_namespaced_config_map(ns).items
    finally:
        kube_sandbox.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_a_protobuf_body_of_a_kind_the_sandbox_has_no_table_for_is_refused_as_unsupported():
    type_meta = _ld(1, b"batch/v1") + _ld(2, b"Job")
    with pytest.raises(errors.ApiError) as e:
        protobuf.decode(protobuf.MAGIC + _ld(1, type_meta) + _ld(2, b""))
    assert e.value.code == 415 and "Job" in e.value.message


def test_a_body_without_the_envelope_is_a_bad_request():
    with pytest.raises(errors.ApiError) as e:
        protobuf.decode(b'{"kind": "Namespace"}')
    assert e.value.code == 400


def test_unknown_field_numbers_are_skipped_and_omitempty_zeros_dropped_as_the_apiserver_does():
    meta = _ld(1, b"ns-a") + _ld(2, b"") + _ld(99, b"from a newer client")  # generateName "" is omitempty
    type_meta = _ld(1, b"v1") + _ld(2, b"Namespace")
    obj = protobuf.decode(protobuf.MAGIC + _ld(1, type_meta) + _ld(2, _ld(1, meta)))
    assert obj == {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns-a"}}


def _ld(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (payloads here stay under 128 bytes: a one-byte length)."""
    assert len(payload) < 128
    return _varint(number << 3 | 2) + bytes([len(payload)]) + payload


def _varint(value: int) -> bytes:
    out = b""
    while value >= 0x80:
        out += bytes([value & 0x7F | 0x80])
        value >>= 7
    return out + bytes([value])
