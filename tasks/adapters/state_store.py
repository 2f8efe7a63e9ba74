"""Where run state lives: one small interface over a local directory or an S3 prefix.

Keys are slash-separated paths under the store's root (``runs/<deployment>/<run id>.json``, the
ledger; ``runs/<deployment>/<run id>/bench/...``; ``baselines/...``; ``leases/...``). Updates that
must not be lost are conditional, the way Terraform's S3 backend keeps state and its lock:

    put(key, data, if_match=CREATE)   only if the key does not exist      (S3: If-None-Match: *)
    put(key, data, if_match=etag)     only if nobody wrote since the read  (S3: If-Match: <etag>)

and a lost race raises ``StateConflict``: the caller re-reads and decides again. A reader sees the
old object or the whole new one, never a part (S3 PUTs are atomic; the local store renames).

Files a stage writes as a folder (the benchmark's raw records and report, the fabric's raw
results, the baselines) are written under ``local_root`` and sent with ``push``; a later stage or
a resumed run on another worker gets them back with ``pull``. For the local store both are no-ops:
``local_root`` is the store.

S3 conditional writes: https://docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-writes.html
(412 PreconditionFailed when the condition fails; 409 ConditionalRequestConflict when a concurrent
conditional write to the same key won; an If-Match on a missing key is 404 NoSuchKey).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tasks.errors import ConfigError, RemoteUnavailable, TransientError

CREATE = "*"  # if_match=CREATE: write only when the key does not exist yet


class StateConflict(TransientError):
    """Someone else wrote the key first: read it again and decide again."""


@dataclass(frozen=True)
class Stored:
    data: bytes
    etag: str


class StateStore(Protocol):
    uri: str
    local_root: Path

    def get(self, key: str) -> Stored | None: ...

    def put(self, key: str, data: bytes, if_match: str | None = None) -> str: ...

    def delete(self, key: str) -> None: ...

    def keys(self, prefix: str = "") -> list[str]: ...

    def push(self, prefix: str) -> int: ...

    def pull(self, prefix: str) -> Path: ...


def open_uri(uri: str | None, default_root: Path, region: str | None = None) -> StateStore:
    """The store at ``uri``, with an S3 client from the standard environment when it is S3 (the
    wiring, `pdlift state`, and a results block Prefect loads back all open stores this way)."""
    if uri and uri.startswith("s3://"):
        from tasks.adapters.s3 import s3_client

        return S3Store(uri, s3_client(region))
    return open_store(uri, default_root)


def open_store(uri: str | None, default_root: Path, s3_client=None) -> StateStore:
    """``s3://bucket/prefix`` is the shared store (through ``s3_client``); a path (or ``file://``
    path, or nothing: the default root) is a local directory."""
    if uri and uri.startswith("s3://"):
        return S3Store(uri, s3_client)
    if uri and "://" in uri and not uri.startswith("file://"):
        raise ConfigError(f"state store {uri!r}: use s3://bucket/prefix or a local directory")
    return LocalStore(Path(uri.removeprefix("file://")) if uri else default_root)


def _etag(data: bytes) -> str:
    # S3's ETag of a single-part PUT is the MD5 of the body, quoted; the local store uses the same.
    return '"' + hashlib.md5(data, usedforsecurity=False).hexdigest() + '"'


def _check_key(key: str) -> str:
    parts = key.split("/")
    if not key or key.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ConfigError(f"state key {key!r} is not a relative path of names")
    return key


class LocalStore:
    """A directory. Conditional writes hold an exclusive lock on a per-key lock file while they
    compare and rename, so two processes on one machine (one laptop, one shared volume) race safely."""

    def __init__(self, root: Path):
        self.local_root = Path(root)
        self.uri = str(self.local_root)

    def _path(self, key: str) -> Path:
        return self.local_root / _check_key(key)

    def get(self, key: str) -> Stored | None:
        try:
            data = self._path(key).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None
        return Stored(data, _etag(data))

    def put(self, key: str, data: bytes, if_match: str | None = None) -> str:
        path = self._path(key)
        with self._locked(path):
            if if_match is not None:
                current = self.get(key)
                if if_match == CREATE and current is not None:
                    raise StateConflict(f"{self.uri}/{key} exists already")
                if if_match != CREATE and (current is None or current.etag != if_match):
                    raise StateConflict(f"{self.uri}/{key} changed since it was read")
            write_atomic(path, data)
        return _etag(data)

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def keys(self, prefix: str = "") -> list[str]:
        base = self.local_root / prefix if prefix else self.local_root
        if base.is_file():
            return [prefix]
        if not base.is_dir():
            return []
        return sorted(str(p.relative_to(self.local_root)) for p in base.rglob("*")
                      if p.is_file() and not p.name.startswith(".") and ".locks" not in p.parts)

    def push(self, prefix: str) -> int:
        return 0  # the files are in the store already

    def pull(self, prefix: str) -> Path:
        return self.local_root / prefix

    @contextlib.contextmanager
    def _locked(self, path: Path) -> Iterator[None]:
        # Named by the key, not the path: one volume mounted at two paths still shares one lock.
        lock = self.local_root / ".locks" / (hashlib.sha256(str(path.relative_to(self.local_root)).encode())
                                             .hexdigest()[:24] + ".lock")
        lock.parent.mkdir(parents=True, exist_ok=True)
        with open(lock, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)


class S3Store:
    """``s3://bucket/prefix`` through boto3's classic client (the wiring's S3 configuration: the
    sandbox's SeaweedFS through AWS_ENDPOINT_URL_S3). Folders are cached under a local directory
    per store (``local_root``); nothing there is needed again: ``pull`` fetches what a run reads."""

    def __init__(self, uri: str, client, cache_root: Path | None = None):
        bucket, _, prefix = uri.removeprefix("s3://").partition("/")
        if not bucket:
            raise ConfigError(f"state store {uri!r}: name a bucket (s3://bucket/prefix)")
        self.uri, self.bucket, self.prefix = uri.rstrip("/"), bucket, prefix.strip("/")
        self._client = client
        digest = hashlib.sha256(self.uri.encode()).hexdigest()[:12]
        self.local_root = Path(cache_root or Path(tempfile.gettempdir()) / "pdlift-state") / digest

    @property
    def _s3(self):
        return self._client

    def _key(self, key: str) -> str:
        _check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def get(self, key: str) -> Stored | None:
        with self._translated(key):
            try:
                got = self._s3.get_object(Bucket=self.bucket, Key=self._key(key))
            except self._s3.exceptions.NoSuchKey:
                return None
            return Stored(got["Body"].read(), got["ETag"])

    def put(self, key: str, data: bytes, if_match: str | None = None) -> str:
        condition = {} if if_match is None else {"IfNoneMatch": "*"} if if_match == CREATE else {"IfMatch": if_match}
        with self._translated(key, conditional=if_match is not None):
            return self._s3.put_object(Bucket=self.bucket, Key=self._key(key), Body=data, **condition)["ETag"]

    def delete(self, key: str) -> None:
        with self._translated(key):
            self._s3.delete_object(Bucket=self.bucket, Key=self._key(key))

    def keys(self, prefix: str = "") -> list[str]:
        return sorted(self._listing(prefix))

    def _listing(self, prefix: str) -> dict[str, str]:
        """{key: etag} under ``prefix`` ("runs/x" is runs/x and runs/x/..., not runs/xy)."""
        root = f"{self.prefix}/" if self.prefix else ""
        out: dict[str, str] = {}
        with self._translated(prefix or "(all)"):
            for page in self._s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=root + prefix):
                out.update((o["Key"][len(root):], o["ETag"]) for o in page.get("Contents", []))
        return {k: e for k, e in out.items() if not prefix or k == prefix or k.startswith(prefix.rstrip("/") + "/")}

    def push(self, prefix: str) -> int:
        """Every file under ``local_root/prefix`` (or that file) the store does not hold as it is;
        returns how many were sent (a folder pushed again sends only what changed)."""
        base = self.local_root / prefix
        files = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file()) if base.is_dir() else []
        held, sent = self._listing(prefix) if files else {}, 0
        for path in files:
            key, data = str(path.relative_to(self.local_root)), path.read_bytes()
            if held.get(key) != _etag(data):
                self.put(key, data)
                sent += 1
        return sent

    def pull(self, prefix: str) -> Path:
        """The store's files under ``prefix`` (or that key) into ``local_root``, those not already
        there as they are; returns the local path."""
        for key, etag in self._listing(prefix).items():
            local = self.local_root / key
            if local.is_file() and _etag(local.read_bytes()) == etag:
                continue
            got = self.get(key)
            if got is not None:
                write_atomic(local, got.data)
        return self.local_root / prefix

    @contextlib.contextmanager
    def _translated(self, key: str, conditional: bool = False) -> Iterator[None]:
        from botocore.exceptions import BotoCoreError, ClientError

        from tasks.adapters import aws_client

        where = f"{self.uri}/{key}"
        try:
            yield
        except ClientError as e:
            code = e.response.get("Error", {}).get("Code", "")
            status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if conditional and (code in ("PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey")
                                or status in (409, 412)):
                raise StateConflict(f"{where}: someone else wrote it first ({code or status})") from None
            if code in ("AccessDenied", "AllAccessDisabled", "InvalidAccessKeyId", "SignatureDoesNotMatch",
                        "ExpiredToken", "InvalidToken", "KMS.AccessDeniedException"):
                raise ConfigError(f"state store {where}: access denied ({code}); the worker's role needs "
                                  f"s3:GetObject, s3:PutObject, s3:DeleteObject and s3:ListBucket there "
                                  f"(`pdlift iam-policy BLUEPRINT`), and kms:Decrypt / kms:GenerateDataKey "
                                  f"when the bucket is encrypted with a customer KMS key") from None
            if code == "NoSuchBucket":
                raise ConfigError(f"state store {self.uri}: bucket {self.bucket} does not exist; create it or fix "
                                  f"state.uri / PDLIFT_STATE_URI") from None
            raise RemoteUnavailable(f"state store {where}: {code or status}: "
                                    f"{e.response.get('Error', {}).get('Message', '')}") from None
        except BotoCoreError as e:  # no credentials, no endpoint, a dropped connection: named, with the fix
            raise aws_client.translate(e, f"state store {where}") from None


def write_atomic(path: Path, data: bytes | str) -> None:
    """Write ``path`` so a reader sees the old file or the whole new one, never a part (fsync, rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
