"""The two state stores the adapters' contract tests hold to the same behaviour."""

from __future__ import annotations

import uuid

import pytest

from tasks.adapters.state_store import LocalStore, S3Store

STATE_BUCKET = "pdlift-state"


@pytest.fixture(scope="session")
def s3_state(s3_sandbox):
    """A boto3 client of the sandbox's S3 (SeaweedFS) with the state bucket made."""
    from sandbox.s3 import ensure_bucket

    client = s3_sandbox.client()
    ensure_bucket(client, STATE_BUCKET)
    return client


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path):
    """A fresh, empty store: a directory, or a prefix of its own in the sandbox's S3."""
    if request.param == "local":
        return LocalStore(tmp_path / "state")
    client = request.getfixturevalue("s3_state")
    return S3Store(f"s3://{STATE_BUCKET}/t-{uuid.uuid4().hex[:8]}", client, cache_root=tmp_path / "cache")
