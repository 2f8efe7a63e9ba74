"""The S3 manifest side against moto: checksums, pdlift-manifest.json, headers, error translation."""

from __future__ import annotations

import hashlib
import json

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from cli.main import main as pdlift
from tasks.adapters.s3 import WeightStore, manifest_for, write_hash_file
from tasks.errors import ApiThrottled, ConfigError, RemoteUnavailable, RequestRejected, WeightVerificationFailed
from tasks.planning.staging import HASH_FILE, check_safetensors_header
from tests.sandbox.staging.safetensors_files import safetensors_bytes, shard

BUCKET, PREFIX = "pdlift-weights", "model/"
URI = f"s3://{BUCKET}/{PREFIX}"


@pytest.fixture
def s3(monkeypatch):
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-2")
        client.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "us-east-2"})
        yield client


def put(s3, name: str, body: bytes, **kw) -> str:
    s3.put_object(Bucket=BUCKET, Key=PREFIX + name, Body=body, **kw)
    return hashlib.sha256(body).hexdigest()


def test_manifest_uses_the_full_object_sha256_that_s3_already_has(s3):
    sha = put(s3, "a.safetensors", shard(0.01), ChecksumAlgorithm="SHA256")
    manifest = manifest_for(WeightStore(s3), URI)
    (entry,) = manifest.entries
    assert (entry.key, entry.path, entry.sha256, entry.checksum_source) == (
        PREFIX + "a.safetensors", "a.safetensors", sha, "s3")
    assert entry.size == s3.head_object(Bucket=BUCKET, Key=entry.key)["ContentLength"]


def test_objects_without_a_checksum_need_pdlift_weights_manifest(s3):
    put(s3, "a.safetensors", shard(0.01))
    with pytest.raises(ConfigError, match=f"pdlift weights manifest {URI}"):
        manifest_for(WeightStore(s3), URI)


def test_weights_manifest_hashes_each_object_once_and_the_manifest_then_uses_it(s3):
    shas = {PREFIX + n: put(s3, n, shard(0.02, n)) for n in ("a.safetensors", "b.safetensors", "config.json")}
    hashed = []
    store = WeightStore(s3, max_workers=2)
    write_hash_file(store, URI, on_object=lambda key, size: hashed.append(key))
    assert sorted(hashed) == sorted(shas)
    doc = json.loads(s3.get_object(Bucket=BUCKET, Key=PREFIX + HASH_FILE)["Body"].read())
    assert {k: v["sha256"] for k, v in doc["objects"].items()} == shas

    hashed.clear()
    shas[PREFIX + "c.safetensors"] = put(s3, "c.safetensors", shard(0.01, "c"))
    write_hash_file(store, URI, on_object=lambda key, size: hashed.append(key))
    assert hashed == [PREFIX + "c.safetensors"]  # only the new object is read again
    manifest = manifest_for(store, URI)
    assert {e.key: e.sha256 for e in manifest.entries} == shas
    assert {e.checksum_source for e in manifest.entries} == {HASH_FILE}


def test_the_cli_writes_the_hash_file(s3, capsys):
    put(s3, "a.safetensors", shard(0.01))
    assert pdlift(["weights", "manifest", URI]) == 0
    assert f"{URI}{HASH_FILE}: 1 objects" in capsys.readouterr().out


def test_an_object_replaced_after_listing_fails_hashing_instead_of_recording_a_wrong_sum(s3):
    put(s3, "a.safetensors", shard(0.01))
    store = WeightStore(s3)
    (obj,) = store.list_objects(BUCKET, PREFIX)
    put(s3, "a.safetensors", shard(0.01))
    with pytest.raises(WeightVerificationFailed, match="changed while it was being read"):
        store.sha256(BUCKET, obj.key, obj.etag)


def test_safetensors_headers_larger_than_one_ranged_get_are_read_whole(s3):
    tensors = {f"model.layers.{i}.mlp.experts.{j}.weight": ("F8_E4M3", [4, 4])
               for i in range(40) for j in range(40)}
    body = safetensors_bytes(tensors)
    put(s3, "big-header.safetensors", body)
    store = WeightStore(s3)
    (obj,) = store.list_objects(BUCKET, PREFIX)
    header = store.safetensors_header(BUCKET, obj.key, obj.size, obj.etag)
    assert len(header) > 64 << 10
    assert check_safetensors_header(obj.key, header, obj.size) == 1600


def test_a_truncated_shard_fails_its_header_check_naming_the_key(s3):
    put(s3, "cut.safetensors", shard(0.01)[:200])
    store = WeightStore(s3)
    (obj,) = store.list_objects(BUCKET, PREFIX)
    with pytest.raises(WeightVerificationFailed, match="model/cut.safetensors"):
        check_safetensors_header(obj.key, store.safetensors_header(BUCKET, obj.key, obj.size, obj.etag), obj.size)


def test_a_missing_bucket_is_a_config_error(s3):
    with pytest.raises(ConfigError, match="NoSuchBucket"):
        manifest_for(WeightStore(s3), "s3://no-such-bucket/model/")


@pytest.mark.parametrize("code,status,expected", [
    ("SlowDown", 503, ApiThrottled),
    ("AccessDenied", 403, RequestRejected),
    ("InternalError", 500, RemoteUnavailable),
])
def test_s3_errors_become_the_project_errors_with_their_cause(code, status, expected):
    client = boto3.client("s3", region_name="us-east-2")
    with Stubber(client) as stub:
        stub.add_client_error("list_objects_v2", service_error_code=code, http_status_code=status)
        with pytest.raises(expected, match=code) as caught:
            WeightStore(client).list_objects(BUCKET, PREFIX)
    assert caught.value.__cause__ is not None
