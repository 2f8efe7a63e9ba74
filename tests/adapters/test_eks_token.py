"""EKS tokens are made as `aws eks get-token` makes them: a presigned STS GetCallerIdentity URL."""

from __future__ import annotations

import base64
import datetime as dt
import json
from urllib.parse import parse_qs, urlsplit

import boto3
import pytest

from tasks.adapters import eks_token

STS_URL = "http://127.0.0.1:1"  # never contacted: presigning is local


def _decode(token: str) -> str:
    body = token[len("k8s-aws-v1."):]
    return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode()


@pytest.fixture
def sts():
    return boto3.Session(aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret",
                         region_name="us-east-2").client("sts", endpoint_url=STS_URL)


def test_token_is_the_prefixed_unpadded_base64url_of_a_presigned_get_caller_identity_url(sts):
    token = eks_token.get_token(sts, "my-cluster")
    assert token.startswith("k8s-aws-v1.")
    assert "=" not in token and "+" not in token and "/" not in token
    url = urlsplit(_decode(token))
    assert f"{url.scheme}://{url.netloc}" == STS_URL and url.path == "/"
    q = {k: v[0] for k, v in parse_qs(url.query).items()}
    assert q["Action"] == "GetCallerIdentity" and q["Version"] == "2011-06-15"
    assert q["X-Amz-Algorithm"] == "AWS4-HMAC-SHA256"
    assert q["X-Amz-Credential"].startswith("AKIDEXAMPLE/") and "/us-east-2/sts/" in q["X-Amz-Credential"]
    assert q["X-Amz-Expires"] == "60"
    assert q["X-Amz-SignedHeaders"].split(";") == ["host", "x-k8s-aws-id"]
    assert len(q["X-Amz-Signature"]) == 64


def test_the_signature_covers_the_cluster_name_which_is_not_in_the_url(sts, monkeypatch):
    fixed = dt.datetime(2025, 1, 1, 12, 0, 0, tzinfo=dt.timezone.utc)
    monkeypatch.setattr("botocore.auth.get_current_datetime", lambda: fixed)

    def signature(cluster):
        url = _decode(eks_token.get_token(sts, cluster))
        assert cluster not in url  # it travels as the signed x-k8s-aws-id header
        return parse_qs(urlsplit(url).query)["X-Amz-Signature"][0]

    assert signature("cluster-a") == signature("cluster-a") != signature("cluster-b")


def test_a_boto3_session_is_accepted_and_the_sts_endpoint_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", "http://127.0.0.1:4599")
    session = boto3.Session(aws_access_key_id="k", aws_secret_access_key="s", region_name="us-east-2")
    url = _decode(eks_token.get_token(session, "c"))
    assert url.startswith("http://127.0.0.1:4599/?Action=GetCallerIdentity")


def test_signing_twice_with_one_client_registers_the_header_hook_once(sts):
    eks_token.get_token(sts, "c")
    eks_token.get_token(sts, "c")
    url = _decode(eks_token.get_token(sts, "c"))
    assert parse_qs(urlsplit(url).query)["X-Amz-SignedHeaders"] == ["host;x-k8s-aws-id"]


def test_a_client_of_another_service_is_refused():
    s3 = boto3.Session(aws_access_key_id="k", aws_secret_access_key="s",
                       region_name="us-east-2").client("s3", endpoint_url=STS_URL)
    with pytest.raises(ValueError, match="STS client"):
        eks_token.get_token(s3, "c")


def test_exec_credential_expires_after_fourteen_minutes():
    now = dt.datetime(2025, 1, 1, 12, 0, 0, tzinfo=dt.timezone.utc)
    cred = eks_token.exec_credential("k8s-aws-v1.abc", now)
    assert cred["apiVersion"] == "client.authentication.k8s.io/v1beta1"
    assert cred["kind"] == "ExecCredential"
    assert cred["status"] == {"expirationTimestamp": "2025-01-01T12:14:00Z", "token": "k8s-aws-v1.abc"}


def test_main_prints_an_exec_credential_for_kubectl(monkeypatch, capsys):
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", STS_URL)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    assert eks_token.main(["--cluster", "pdlift-sandbox", "--region", "us-east-2"]) == 0
    cred = json.loads(capsys.readouterr().out)
    assert cred["status"]["token"].startswith("k8s-aws-v1.")
    assert _decode(cred["status"]["token"]).startswith(STS_URL + "/?Action=GetCallerIdentity")


def test_main_that_cannot_sign_says_why_instead_of_a_traceback(monkeypatch, capsys):
    for var in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", STS_URL)  # a custom endpoint needs a region
    assert eks_token.main(["--cluster", "c"]) == 1
    assert "cannot sign an EKS token for cluster 'c'" in capsys.readouterr().err
