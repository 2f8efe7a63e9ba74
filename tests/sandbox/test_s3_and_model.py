"""The sandbox S3 serves the synthetic model to the real clients: boto3 and s5cmd."""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from sandbox import model as sandbox_model
from sandbox import s3 as sandbox_s3

pytestmark = pytest.mark.sandbox

DTYPE_BYTES = {"F8_E4M3": 1, "BF16": 2, "F32": 4}


def s5cmd_binary() -> str:
    found = Path(sys.executable).parent / "s5cmd"
    return str(found) if found.exists() else (shutil.which("s5cmd") or "s5cmd")


def check_safetensors(header_len: int, header: dict, file_size: int) -> int:
    """The safetensors rules a loader enforces; returns the tensor count."""
    assert header_len % 8 == 0
    meta = header.pop("__metadata__")
    assert meta["format"] == "pt"
    assert all(isinstance(v, str) for v in meta.values())
    spans = []
    for name, t in header.items():
        begin, end = t["data_offsets"]
        assert end - begin == math.prod(t["shape"]) * DTYPE_BYTES[t["dtype"]], name
        spans.append((begin, end))
    spans.sort()
    assert spans[0][0] == 0
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:])), "holes or overlaps"
    assert 8 + header_len + spans[-1][1] == file_size
    return len(spans)


def read_header(s3, bucket: str, key: str) -> tuple[int, dict]:
    prefix = s3.get_object(Bucket=bucket, Key=key, Range="bytes=0-7")["Body"].read()
    n = int.from_bytes(prefix, "little")
    raw = s3.get_object(Bucket=bucket, Key=key, Range=f"bytes=8-{7 + n}")["Body"].read()
    return n, json.loads(raw)


MANIFEST = "pdlift-manifest.json"


def test_boto3_lists_every_model_file_with_its_size(s3_sandbox):
    s3 = s3_sandbox.client()
    listed = s3.list_objects_v2(Bucket=s3_sandbox.bucket, Prefix=s3_sandbox.prefix)
    sizes = {o["Key"][len(s3_sandbox.prefix):]: o["Size"] for o in listed["Contents"]}
    sizes.pop(MANIFEST, None)  # pdlift's own hash manifest, written beside the weights by stage 4
    assert sizes == s3_sandbox.model_files
    assert {"config.json", "tokenizer.json", "tokenizer_config.json",
            "model.safetensors.index.json"} <= set(sizes)
    shards = [k for k in sizes if k.endswith(".safetensors")]
    assert len(shards) >= 2
    total_mb = sum(sizes.values()) / 2**20
    assert abs(total_mb - 256) / 256 < 0.05  # the test default, 256 MB


def test_every_shard_header_parses_and_its_offsets_fill_the_file(s3_sandbox):
    s3 = s3_sandbox.client()
    index = json.loads(s3.get_object(Bucket=s3_sandbox.bucket,
                                     Key=s3_sandbox.prefix + "model.safetensors.index.json")
                       ["Body"].read())
    counted = {}
    for name, size in s3_sandbox.model_files.items():
        if name.endswith(".safetensors"):
            n, header = read_header(s3, s3_sandbox.bucket, s3_sandbox.prefix + name)
            dtypes = {t["dtype"] for k, t in header.items() if k != "__metadata__"}
            assert dtypes <= {"F8_E4M3", "BF16", "F32"}
            counted[name] = check_safetensors(n, header, size)
    per_shard = {}
    for shard in index["weight_map"].values():
        per_shard[shard] = per_shard.get(shard, 0) + 1
    assert per_shard == counted


def test_the_model_is_named_and_shaped_like_the_blueprints_mla_moe(s3_sandbox):
    s3 = s3_sandbox.client()
    config = json.loads(s3.get_object(Bucket=s3_sandbox.bucket,
                                      Key=s3_sandbox.prefix + "config.json")["Body"].read())
    assert config["num_hidden_layers"] == 78 and config["kv_lora_rank"] == 512
    assert config["qk_rope_head_dim"] == 64 and config["index_head_dim"] == 128
    assert config["n_routed_experts"] == 256 and config["max_position_embeddings"] == 202752
    first = sorted(k for k in s3_sandbox.model_files if k.endswith(".safetensors"))[-1]
    _, header = read_header(s3, s3_sandbox.bucket, s3_sandbox.prefix + first)
    names = set(header)
    assert any(".mlp.experts.255.down_proj.weight" in n for n in names)
    expert = next(n for n in names if n.endswith("experts.7.gate_proj.weight"))
    assert header[expert]["dtype"] == "F8_E4M3"
    assert header[expert]["shape"] == [config["moe_intermediate_size"], config["hidden_size"]]
    tokenizer = json.loads(s3.get_object(Bucket=s3_sandbox.bucket,
                                         Key=s3_sandbox.prefix + "tokenizer.json")["Body"].read())
    ids = tokenizer["model"]["vocab"].values()
    assert len(ids) >= 256 and max(ids) < config["vocab_size"]


def test_s5cmd_downloads_the_model_with_the_dummy_credentials(s3_sandbox, tmp_path):
    env = {**os.environ, **s3_sandbox.env(), "AWS_EC2_METADATA_DISABLED": "true",
           "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
           "AWS_CONFIG_FILE": str(tmp_path / "none")}
    src = f"s3://{s3_sandbox.bucket}/{s3_sandbox.prefix}*"
    run = subprocess.run([s5cmd_binary(), "--endpoint-url", s3_sandbox.endpoint, "cp", src,
                          str(tmp_path / "model") + "/"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    got = {p.name: p.stat().st_size for p in (tmp_path / "model").iterdir() if p.name != MANIFEST}
    assert got == s3_sandbox.model_files
    shard = min((p for p in (tmp_path / "model").glob("*.safetensors")),
                key=lambda p: p.stat().st_size)
    with open(shard, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        check_safetensors(n, json.loads(f.read(n)), shard.stat().st_size)


def test_s5cmd_with_a_wrong_secret_is_refused(s3_sandbox, tmp_path):
    env = {**os.environ, **s3_sandbox.env(), "AWS_SECRET_ACCESS_KEY": "wrong",
           "AWS_EC2_METADATA_DISABLED": "true"}
    run = subprocess.run([s5cmd_binary(), "--endpoint-url", s3_sandbox.endpoint, "ls",
                          f"s3://{s3_sandbox.bucket}/*"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode != 0
    assert "SignatureDoesNotMatch" in run.stderr + run.stdout


def test_boto3_with_a_wrong_secret_is_refused(s3_sandbox):
    s3 = sandbox_s3.client(s3_sandbox.endpoint, s3_sandbox.access_key, "wrong")
    with pytest.raises(ClientError) as err:
        s3.list_objects_v2(Bucket=s3_sandbox.bucket)
    assert err.value.response["Error"]["Code"] == "SignatureDoesNotMatch"


def test_the_same_seed_gives_the_same_bytes_and_a_second_upload_skips_everything(s3_sandbox):
    files = sandbox_model.model_files(size_mb=256, seed=0)
    smallest = min((f for f in files if f.shard), key=lambda f: f.size)
    with smallest.open(seed=0) as local:
        regenerated = hashlib.sha256(local.read()).hexdigest()
    body = s3_sandbox.client().get_object(Bucket=s3_sandbox.bucket,
                                          Key=s3_sandbox.prefix + smallest.name)["Body"]
    assert hashlib.sha256(body.read()).hexdigest() == regenerated
    report = sandbox_model.upload_model(s3_sandbox.client(), s3_sandbox.model_uri, files, seed=0)
    assert report.uploaded == [] and len(report.skipped) == len(files)


def test_another_seed_gives_other_bytes_of_the_same_layout():
    a = sandbox_model.model_files(size_mb=100, seed=1)
    b = sandbox_model.model_files(size_mb=100, seed=2)
    assert [(f.name, f.size) for f in a] == [(f.name, f.size) for f in b]
    with a[0].open(1) as fa, b[0].open(2) as fb:
        fa.read(len(a[0].shard.header))
        fb.read(len(b[0].shard.header))
        assert fa.read(4096) != fb.read(4096)


@pytest.mark.parametrize("size_mb", [512, 4096])
def test_the_model_size_is_configurable_for_benchmarks(size_mb):
    files = sandbox_model.model_files(size_mb=size_mb)
    total = sum(f.size for f in files)
    assert abs(total / 2**20 - size_mb) / size_mb < 0.05
    assert sum(1 for f in files if f.shard) >= 8
