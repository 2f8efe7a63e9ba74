"""One error translator per vendor: the same answer means the same project error, whichever adapter saw it."""

from __future__ import annotations

import errno
import http.server
import json
import socket
import threading

import boto3
import paramiko
import pytest
from botocore.exceptions import ClientError, NoCredentialsError, ParamValidationError, ReadTimeoutError
from botocore.stub import Stubber
from kubernetes import client as k8s

from tasks.adapters import aws_client, kube_errors, ssh_errors
from tasks.adapters.kube_apply import KubeApply
from tasks.adapters.kube_nodes import KubeNodes
from tasks.adapters.s3 import WeightStore
from tasks.adapters.service_routing import ServiceRouting
from tasks.errors import (ApiThrottled, CapacityUnavailable, ConfigError, HostKeyMismatch, RemoteUnavailable,
                          RequestRejected, ResourceGone, StageFailed)

# --- Kubernetes -----------------------------------------------------------------------------

KUBE_STATUS = {401: RequestRejected, 403: RequestRejected, 409: StageFailed, 422: RequestRejected,
               429: ApiThrottled, 500: RemoteUnavailable, 503: RemoteUnavailable}
REASONS = {401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 409: "Conflict", 422: "Invalid",
           429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable"}


class _Answers(http.server.BaseHTTPRequestHandler):
    """Every request gets the status the test set, with a Kubernetes Status document."""

    status = 500
    message = "the answer the test chose"

    def _answer(self):
        body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": self.status,
                           "reason": REASONS.get(self.status, ""), "message": self.message}).encode()
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_PATCH = do_DELETE = do_POST = _answer

    def log_message(self, *args):
        pass


@pytest.fixture
def api_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        _Answers.status, _Answers.message = 500, "the answer the test chose"


def _api(host: str) -> k8s.ApiClient:
    config = k8s.Configuration(host=host)
    config.retries = 0  # one answer per call: the translation is what is under test
    return k8s.ApiClient(config)


def _calls(api: k8s.ApiClient):
    kube = KubeApply(api, timeout_s=5)
    return {"KubeApply.pods": lambda: kube.pods("ns", {"a": "b"}),
            "KubeApply.apply": lambda: kube.apply({"apiVersion": "v1", "kind": "ConfigMap",
                                                   "metadata": {"name": "x", "namespace": "ns"}}),
            "KubeNodes.nodes": lambda: KubeNodes(api).nodes(),
            "KubeNodes.patch_labels": lambda: KubeNodes(api).patch_labels("n", {"a": "b"}),
            "ServiceRouting.endpoints": lambda: ServiceRouting(api, kube).endpoints("ns", "svc")}


@pytest.mark.parametrize("status", sorted(KUBE_STATUS))
def test_every_kubernetes_adapter_maps_an_http_status_to_the_same_project_error(api_server, status):
    _Answers.status = status
    raised, messages = {}, {}
    for name, call in _calls(_api(f"http://127.0.0.1:{api_server.server_port}")).items():
        with pytest.raises(Exception) as caught:
            call()
        raised[name], messages[name] = type(caught.value), str(caught.value)
    assert set(raised.values()) == {KUBE_STATUS[status]}, raised
    if status in (401, 403):  # whichever adapter: the fix is the same access entry
        assert all("refused our credentials" in m and "access entry" in m for m in messages.values()), messages


def test_every_kubernetes_adapter_calls_an_unreachable_api_remote_unavailable():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once the socket is closed
    raised = set()
    for call in _calls(_api(f"http://127.0.0.1:{port}")).values():
        with pytest.raises(Exception) as caught:
            call()
        raised.add(type(caught.value))
    assert raised == {RemoteUnavailable}


def test_a_missing_object_is_gone_for_reads_and_deletes_but_a_missing_kind_is_a_setup_problem(api_server):
    _Answers.status, _Answers.message = 404, 'configmaps "x" not found'
    api = _api(f"http://127.0.0.1:{api_server.server_port}")
    assert KubeApply(api).get("v1", "ConfigMap", "x", "ns") is None
    assert KubeApply(api).delete("v1", "ConfigMap", "x", "ns") is False
    assert ServiceRouting(api).endpoints("ns", "svc") == []
    assert KubeNodes(api).delete_namespace("gone") is None
    assert type(kube_errors.translate(kube_errors.HttpStatus(404, b'{"reason": "NotFound"}'), "read")) is ResourceGone
    not_served = kube_errors.HttpStatus(404, json.dumps({"message": kube_errors.NOT_SERVED}).encode())
    assert type(kube_errors.translate(not_served, "apply LeaderWorkerSet")) is StageFailed
    no_group = kube_errors.translate(kube_errors.HttpStatus(404, b"404 page not found\n"), "apply LeaderWorkerSet")
    assert type(no_group) is StageFailed and "CRD" in str(no_group)  # a group no CRD provides: plain text
    assert type(kube_errors.translate(kube_errors.HttpStatus(404, b"404 page not found, really"), "read")) is ResourceGone


# --- botocore: EC2, EKS and S3 share one table ------------------------------------------------

AWS_CODES = [("RequestLimitExceeded", 503, ApiThrottled), ("SlowDown", 503, ApiThrottled),
             ("InternalError", 500, RemoteUnavailable), ("ServiceUnavailable", 503, RemoteUnavailable),
             ("AccessDenied", 403, RequestRejected), ("UnauthorizedOperation", 403, RequestRejected),
             ("NoSuchBucket", 404, ConfigError), ("NoSuchKey", 404, ResourceGone),
             ("InvalidInstanceID.NotFound", 400, ResourceGone),
             ("InsufficientInstanceCapacity", 500, CapacityUnavailable),
             ("InvalidParameterValue", 400, RequestRejected)]


def _client_error(code: str, status: int, operation: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "what AWS said"},
                        "ResponseMetadata": {"HTTPStatusCode": status}}, operation)


@pytest.mark.parametrize("code, status, expected", AWS_CODES, ids=[c for c, _, _ in AWS_CODES])
def test_an_aws_error_code_is_the_same_project_error_from_ec2_and_from_s3(code, status, expected, monkeypatch):
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    ec2_client = boto3.client("ec2", region_name="us-east-2")
    with Stubber(ec2_client) as stub:  # through the EC2 adapters' own call path (one attempt)
        stub.add_client_error("describe_instances", service_error_code=code, http_status_code=status)
        with pytest.raises(Exception) as raised:
            aws_client.call(ec2_client.describe_instances, "DescribeInstances", attempts=1)
    ec2 = raised.value
    s3 = boto3.client("s3", region_name="us-east-2")
    with Stubber(s3) as stub:
        stub.add_client_error("list_objects_v2", service_error_code=code, http_status_code=status)
        with pytest.raises(Exception) as caught:
            WeightStore(s3).list_objects("pdlift-weights", "model/")
    assert type(ec2) is type(caught.value) is expected
    assert code in str(ec2) and code in str(caught.value)
    assert ec2.__cause__ is not None and caught.value.__cause__ is not None  # the AWS error is kept


def test_an_s3_head_that_carries_only_a_status_is_read_by_its_status():
    bare = ClientError({"Error": {}, "ResponseMetadata": {"HTTPStatusCode": 404}}, "HeadObject")
    assert type(aws_client.translate(bare, "HeadObject")) is ResourceGone
    assert type(aws_client.translate(ClientError({"Error": {}, "ResponseMetadata": {"HTTPStatusCode": 503}},
                                                 "HeadObject"), "HeadObject")) is RemoteUnavailable


def test_botocore_failures_without_an_answer_are_split_by_what_to_do():
    assert type(aws_client.translate(NoCredentialsError(), "s3://b/k")) is ConfigError
    assert type(aws_client.translate(ReadTimeoutError(endpoint_url="https://s3"), "s3://b/k")) is RemoteUnavailable
    refused = aws_client.translate(ParamValidationError(report="Bucket is required"), "s3://b/k")
    assert type(refused) is StageFailed  # not transient: retrying the same bad request cannot help


# --- paramiko ---------------------------------------------------------------------------------


def test_paramiko_and_socket_errors_map_by_what_the_caller_should_do():
    offered, pinned = paramiko.RSAKey.generate(1024), paramiko.RSAKey.generate(1024)
    changed = ssh_errors.translate(paramiko.BadHostKeyException("node", offered, pinned), "node 10.0.0.1")
    assert type(changed) is HostKeyMismatch and "host key changed" in str(changed)
    rejected = ssh_errors.translate(paramiko.AuthenticationException("no"), "node: user u with key k")
    assert type(rejected) is RequestRejected and "aws.ssh.key_pair" in str(rejected)
    # paramiko's text when the node did not answer the authentication in time: busy, not refused
    slow = ssh_errors.translate(paramiko.AuthenticationException("Authentication timeout."), "node: user u")
    assert type(slow) is RemoteUnavailable and "aws.ssh.key_pair" not in str(slow)
    for lost in (paramiko.SSHException("banner"), EOFError(), ConnectionResetError(), socket.timeout(),
                 OSError(errno.EHOSTUNREACH, "no route")):
        assert type(ssh_errors.translate(lost, "node")) is RemoteUnavailable


def test_an_sftp_refusal_stops_while_a_lost_connection_during_sftp_may_be_retried():
    refused = PermissionError(errno.EACCES, "Permission denied")
    assert type(ssh_errors.translate(refused, "node: upload", sftp=True)) is StageFailed
    assert type(ssh_errors.translate(refused, "node: connect")) is RemoteUnavailable  # a socket's EACCES
    assert type(ssh_errors.translate(ConnectionResetError(), "node: upload", sftp=True)) is RemoteUnavailable
