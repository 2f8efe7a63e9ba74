"""S3, orchestrator side (boto3): list the weights, read checksums and headers, hash once.

One narrow interface, ``WeightStore``, over a boto3 S3 client passed in (``s3_client`` builds
one from the standard environment: AWS_ENDPOINT_URL_S3 points it at the sandbox). Never the CRT
transfer client: it ignores endpoint_url and is a cross-process singleton (docs/sources.md#boto3-crt-limits).
botocore errors are translated here, with ``from e``, into the tree in ``tasks.errors``.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from tasks.adapters import aws_client
from tasks.errors import ConfigError, PdliftError, ResourceGone, WeightVerificationFailed
from tasks.planning.staging import (HASH_FILE, ListedObject, Manifest, build_manifest,
                                    hash_file_document, safetensors_header_length, split_s3_uri)

HEADER_PROBE = 64 << 10  # one ranged GET usually covers the whole safetensors header


def s3_client(region: str | None = None, timeout_s: float = 60.0):
    """A classic-engine boto3 S3 client from the environment; path-style for custom endpoints."""
    import boto3
    from botocore.config import Config

    custom = bool(os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL"))
    config = Config(signature_version="s3v4", connect_timeout=min(timeout_s, 10.0), read_timeout=timeout_s,
                    retries={"max_attempts": 5, "mode": "standard"}, max_pool_connections=32,
                    s3={"addressing_style": "path" if custom else "auto"})
    return boto3.session.Session().client("s3", region_name=region, config=config)


class WeightStore:
    """Read-mostly access to one weights prefix. Every method translates botocore errors."""

    def __init__(self, client, max_workers: int = 16):
        self._s3 = client
        self._workers = max_workers

    def list_objects(self, bucket: str, prefix: str) -> list[ListedObject]:
        """ListObjectsV2 over the prefix, then HeadObject(ChecksumMode=ENABLED) per object."""
        keys: list[dict] = []
        with _translated(f"s3://{bucket}/{prefix}"):
            for page in self._s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
                keys += page.get("Contents", [])
        with ThreadPoolExecutor(self._workers) as pool:
            return list(pool.map(lambda o: self._head(bucket, o["Key"]), keys))

    def _head(self, bucket: str, key: str) -> ListedObject:
        with _translated(f"s3://{bucket}/{key}"):
            h = self._s3.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
        return ListedObject(key, h["ContentLength"], h["ETag"], h.get("VersionId"),
                            h.get("ChecksumSHA256"), h.get("ChecksumCRC64NVME"), h.get("ChecksumType"))

    def read_range(self, bucket: str, key: str, start: int, length: int, etag: str | None = None) -> bytes:
        extra = {"IfMatch": etag} if etag else {}
        with _translated(f"s3://{bucket}/{key}"):
            body = self._s3.get_object(Bucket=bucket, Key=key, Range=f"bytes={start}-{start + length - 1}",
                                       **extra)["Body"]
            return body.read()

    def read_json(self, bucket: str, key: str) -> dict | None:
        """The JSON document at ``key``, or None when there is none."""
        try:
            with _translated(f"s3://{bucket}/{key}"):
                raw = self._s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        except ResourceGone:  # NoSuchKey (a missing bucket stays a ConfigError)
            return None
        try:
            return json.loads(raw)
        except ValueError as e:
            raise ConfigError(f"s3://{bucket}/{key} is not JSON; delete it and run "
                              "`pdlift weights manifest` again") from e

    def write_json(self, bucket: str, key: str, doc: dict) -> None:
        with _translated(f"s3://{bucket}/{key}"):
            self._s3.put_object(Bucket=bucket, Key=key, Body=json.dumps(doc, indent=1).encode(),
                                ContentType="application/json")

    def sha256(self, bucket: str, key: str, etag: str, chunk: int = 8 << 20) -> str:
        """SHA-256 of the object as it is now; If-Match on ``etag`` so a concurrent overwrite fails."""
        digest = hashlib.sha256()
        with _translated(f"s3://{bucket}/{key}"):
            body = self._s3.get_object(Bucket=bucket, Key=key, IfMatch=etag)["Body"]
            for block in iter(lambda: body.read(chunk), b""):
                digest.update(block)
        return digest.hexdigest()

    def safetensors_header(self, bucket: str, key: str, size: int, etag: str) -> bytes:
        """The JSON header bytes of a safetensors object (two ranged GETs at most)."""
        head = self.read_range(bucket, key, 0, min(size, HEADER_PROBE), etag)
        n = safetensors_header_length(key, head, size)
        if 8 + n <= len(head):
            return head[8:8 + n]
        return head[8:] + self.read_range(bucket, key, len(head), 8 + n - len(head), etag)

    def map(self, fn: Callable, items: list) -> list:
        """``fn`` over ``items`` on this store's thread pool (bounded), in order."""
        with ThreadPoolExecutor(self._workers) as pool:
            return list(pool.map(fn, items))


def manifest_for(store: WeightStore, uri: str, write_missing: bool = False) -> Manifest:
    """The staging manifest for ``uri``: listing + S3 checksums + pdlift-manifest.json. With
    ``write_missing``, objects without a checksum anywhere are hashed into that file first (one
    listing serves both)."""
    bucket, prefix = split_s3_uri(uri)
    objects = store.list_objects(bucket, prefix)
    doc = _hash_missing(store, uri, objects) if write_missing else store.read_json(bucket, prefix + HASH_FILE)
    return build_manifest(bucket, prefix, objects, doc)


def write_hash_file(store: WeightStore, uri: str,
                    on_object: Callable[[str, int], None] | None = None) -> dict:
    """Hash every object that has no full-object checksum yet, once; write pdlift-manifest.json.

    Objects whose record still matches (size and ETag) are not read again, so a re-run after
    adding a shard hashes only that shard. Returns the document written.
    """
    bucket, prefix = split_s3_uri(uri)
    return _hash_missing(store, uri, store.list_objects(bucket, prefix), on_object)


def _hash_missing(store: WeightStore, uri: str, listed: list[ListedObject],
                  on_object: Callable[[str, int], None] | None = None) -> dict:
    bucket, prefix = split_s3_uri(uri)
    objects = [o for o in listed if o.key != prefix + HASH_FILE]
    old = (store.read_json(bucket, prefix + HASH_FILE) or {}).get("objects", {})

    def one(o: ListedObject) -> tuple[str, tuple[int, str, str]]:
        rec = old.get(o.key)
        if rec and rec.get("size") == o.size and rec.get("etag") == o.etag:
            return o.key, (o.size, o.etag, rec["sha256"])
        sha = store.sha256(bucket, o.key, o.etag)
        if on_object:
            on_object(o.key, o.size)
        return o.key, (o.size, o.etag, sha)

    if not objects:
        raise ConfigError(f"no objects under {uri}; check the URI")
    doc = hash_file_document(uri, dict(store.map(one, objects)))
    store.write_json(bucket, prefix + HASH_FILE, doc)
    return doc


class _translated:
    """Context manager: botocore/urllib3 exceptions -> pdlift errors naming the object
    (``aws_client.translate``, shared with EC2/EKS)."""

    def __init__(self, what: str):
        self.what = what

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if exc is None or isinstance(exc, PdliftError) or not isinstance(exc, Exception):
            return False
        from botocore.exceptions import BotoCoreError, ClientError

        if isinstance(exc, ClientError) and aws_client.error_code(exc) in ("PreconditionFailed", "412"):
            # Reads here carry If-Match on the listed ETag: the object was replaced while being read.
            raise WeightVerificationFailed(f"{self.what} changed while it was being read; run again") from exc
        if isinstance(exc, (ClientError, BotoCoreError, OSError)):
            raise aws_client.translate(exc, self.what) from exc
        return False
