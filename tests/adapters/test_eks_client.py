"""The EKS ApiClient's cluster CA file (tasks/adapters/eks.py): there while the client can open a
connection, gone once it is closed, collected, or could not be made."""

from __future__ import annotations

import base64
import gc
import os
from pathlib import Path

import boto3
import pytest

from tasks.adapters import eks

CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nnot read here\n-----END CERTIFICATE-----\n").decode()
CLUSTER = eks.Cluster("pdlift-test", "https://127.0.0.1:6443", CA, "10.100.0.0/16")


@pytest.fixture
def sts():
    """Presigning is local: the endpoint is never contacted."""
    return boto3.Session(aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret",
                         region_name="us-east-2").client("sts", endpoint_url="http://127.0.0.1:1")


@pytest.fixture
def own_tmp(tmp_path, monkeypatch) -> Path:
    """The temporary directory the CA files go to, this test's own (tempfile reads TMPDIR once)."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_the_ca_file_is_private_while_the_client_lives_and_removed_when_it_is_closed(sts, own_tmp):
    client = eks.api_client(CLUSTER, sts)
    path = Path(client.configuration.ssl_ca_cert)
    assert path.parent == own_tmp and path.read_bytes() == base64.b64decode(CA)
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert client.configuration.api_key["authorization"].startswith("k8s-aws-v1.")
    client.close()
    assert not path.exists()
    client.close()  # twice is fine


def test_a_client_nobody_closed_removes_its_ca_file_when_collected(sts, own_tmp):
    client = eks.api_client(CLUSTER, sts)
    path = Path(client.configuration.ssl_ca_cert)
    assert path.exists()
    del client
    gc.collect()
    assert not path.exists()


def test_a_token_that_cannot_be_signed_leaves_no_ca_file(own_tmp, monkeypatch):
    def refuse(*_args):
        raise RuntimeError("no credentials")

    monkeypatch.setattr(eks.eks_token, "get_token", refuse)
    with pytest.raises(RuntimeError, match="no credentials"):
        eks.api_client(CLUSTER, object())
    assert os.listdir(own_tmp) == []
