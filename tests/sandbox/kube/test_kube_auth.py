"""The API stand-in authenticates as EKS does: only presigned STS tokens for this cluster pass."""

from __future__ import annotations

import datetime as dt

import pytest


def test_a_request_without_a_token_is_refused_with_an_unauthorized_status(kube_sandbox):
    status, body = kube_sandbox.raw("GET", "/api/v1/namespaces")
    assert status == 401
    assert body["kind"] == "Status" and body["reason"] == "Unauthorized" and body["code"] == 401


@pytest.mark.parametrize("token", ["nope", "k8s-aws-v1.", "k8s-aws-v1.aHR0cDovL2V4YW1wbGUuY29tLw"])
def test_a_token_that_is_not_a_presigned_sts_url_is_refused(kube_sandbox, token):
    assert kube_sandbox.raw("GET", "/api/v1/namespaces", token=token)[0] == 401


def test_a_valid_presigned_token_is_accepted(kube_sandbox):
    status, body = kube_sandbox.raw("GET", "/api/v1/namespaces", token=kube_sandbox.token())
    assert status == 200
    assert {"default", "kube-system"} <= {ns["metadata"]["name"] for ns in body["items"]}


def test_a_token_for_another_cluster_is_refused(kube_sandbox):
    token = kube_sandbox.token(cluster_name="someone-elses-cluster")
    assert kube_sandbox.raw("GET", "/api/v1/namespaces", token=token)[0] == 401


def test_a_token_signed_with_unknown_credentials_is_refused(kube_sandbox):
    import boto3

    from tasks.adapters.eks_token import get_token

    sts = boto3.Session(aws_access_key_id="testing", aws_secret_access_key="not-the-secret",
                        region_name="us-east-2").client("sts", endpoint_url=kube_sandbox.sts_endpoint)
    assert kube_sandbox.raw("GET", "/api/v1/namespaces", token=get_token(sts, "pdlift-sandbox"))[0] == 401


def test_a_token_for_another_sts_endpoint_is_refused(kube_sandbox):
    import boto3

    from tasks.adapters.eks_token import get_token

    sts = boto3.Session(region_name="us-east-2").client("sts", endpoint_url="http://127.0.0.1:9")
    assert kube_sandbox.raw("GET", "/api/v1/namespaces", token=get_token(sts, "pdlift-sandbox"))[0] == 401


def test_a_token_older_than_fifteen_minutes_is_refused(kube_sandbox, monkeypatch):
    old = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=16)
    monkeypatch.setattr("botocore.auth.get_current_datetime", lambda: old)
    expired = kube_sandbox.token()
    monkeypatch.undo()
    assert kube_sandbox.raw("GET", "/api/v1/namespaces", token=expired)[0] == 401


def test_a_token_fourteen_minutes_old_is_still_accepted_as_on_eks(kube_sandbox, monkeypatch):
    # EKS ignores the 60 s X-Amz-Expires the CLI writes and honours 15 minutes from X-Amz-Date.
    old = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=14)
    monkeypatch.setattr("botocore.auth.get_current_datetime", lambda: old)
    token = kube_sandbox.token()
    monkeypatch.undo()
    assert kube_sandbox.raw("GET", "/api/v1/namespaces", token=token)[0] == 200


def test_version_and_health_answer_without_a_token_as_on_eks(kube_sandbox):
    status, body = kube_sandbox.raw("GET", "/version")
    assert status == 200 and body["major"] == "1"
    assert kube_sandbox.raw("GET", "/healthz")[0] == 200


def test_the_kubeconfig_names_the_server_its_ca_and_the_pdlift_token_plugin(kube_sandbox):
    import yaml

    cfg = yaml.safe_load(kube_sandbox.kubeconfig.read_text())
    cluster = cfg["clusters"][0]["cluster"]
    assert cluster["server"] == kube_sandbox.server and cluster["certificate-authority-data"]
    exec_ = cfg["users"][0]["user"]["exec"]
    assert exec_["args"][:4] == ["-m", "tasks.adapters.eks_token", "--cluster", "pdlift-sandbox"]
    assert exec_["apiVersion"] == "client.authentication.k8s.io/v1beta1"
