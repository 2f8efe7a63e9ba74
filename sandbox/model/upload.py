"""Uploading the checkpoint to S3 (boto3's classic transfer manager), or writing it to disk."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from sandbox.model.files import BLOCK, SEED_KEY, ModelFile

DEFAULT_URI = "s3://pdlift-weights/tiny-moe-mla/"


def split_uri(uri: str) -> tuple[str, str]:
    """s3://bucket/prefix/ -> (bucket, 'prefix/')."""
    if not uri.startswith("s3://"):
        raise ValueError(f"not an s3:// URI: {uri}")
    bucket, _, prefix = uri[5:].partition("/")
    return bucket, (prefix.rstrip("/") + "/") if prefix else ""


@dataclass(frozen=True)
class UploadReport:
    uploaded: list[str]
    skipped: list[str]
    bytes_uploaded: int
    seconds: float


def _already_there(s3, bucket: str, key: str, f: ModelFile, seed: int) -> bool:
    try:
        head = s3.head_object(Bucket=bucket, Key=key)
    except s3.exceptions.ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return False
        raise
    return (head["ContentLength"] == f.size
            and head.get("Metadata", {}).get(SEED_KEY) == str(seed))


def upload_model(s3, uri: str, files: list[ModelFile], seed: int = 0,
                 log=lambda msg: None) -> UploadReport:
    from boto3.s3.transfer import TransferConfig  # boto3 only where an upload happens

    bucket, prefix = split_uri(uri)
    transfer = TransferConfig(multipart_threshold=16 << 20, multipart_chunksize=16 << 20,
                              max_concurrency=4, preferred_transfer_client="classic")
    start, uploaded, skipped, nbytes = time.monotonic(), [], [], 0
    for f in files:
        key = prefix + f.name
        if _already_there(s3, bucket, key, f, seed):
            skipped.append(key)
            continue
        with f.open(seed) as body:
            s3.upload_fileobj(body, bucket, key, Config=transfer,
                              ExtraArgs={"Metadata": {SEED_KEY: str(seed)}})
        uploaded.append(key)
        nbytes += f.size
        log(f"uploaded s3://{bucket}/{key} ({f.size / 1e6:.1f} MB)")
    return UploadReport(uploaded, skipped, nbytes, time.monotonic() - start)


def write_model(out_dir: Path, files: list[ModelFile], seed: int = 0) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for f in files:
        with f.open(seed) as src, open(out_dir / f.name, "wb") as dst:
            while chunk := src.read(BLOCK):
                dst.write(chunk)


