"""Every S3 request a weights run sends is allowed by `pdlift iam-policy` for its resource.

The run: `pdlift weights manifest` (boto3: ListObjectsV2, HeadObject, GetObject to hash, PutObject of
pdlift-manifest.json), the manifest read back, then the node stager (its own SigV4: ranged GETs).
A recording proxy in front of the sandbox S3 logs each request as S3's server access log would;
each is mapped to the IAM action and resource S3 authorises it as ("Actions, resources, and condition
keys for Amazon S3": HeadObject is s3:GetObject, ListObjectsV2 s3:ListBucket with the s3:prefix
condition key) and evaluated against the generated policy.
"""

from __future__ import annotations

import fnmatch
import urllib.parse

import pytest

from tasks.adapters.s3 import WeightStore, manifest_for, s3_client, write_hash_file
from tasks.planning import iam
from tests.sandbox.staging.safetensors_files import shard
from tests.sandbox.staging.support import upload
from tests.sandbox.staging.test_stager import node_env, run

pytestmark = pytest.mark.sandbox


def iam_request(method: str, path: str) -> tuple[str, str, dict]:
    """(action, resource ARN, condition context) S3 checks a path-style request against."""
    url = urllib.parse.urlsplit(path)
    bucket, _, key = urllib.parse.unquote(url.path).lstrip("/").partition("/")
    query = urllib.parse.parse_qs(url.query, keep_blank_values=True)
    if not key and method == "GET" and query.get("list-type") == ["2"]:
        return "s3:ListBucket", f"arn:aws:s3:::{bucket}", {"s3:prefix": query.get("prefix", [""])[0]}
    object_actions = {"GET": "s3:GetObject", "HEAD": "s3:GetObject", "PUT": "s3:PutObject",
                      "DELETE": "s3:DeleteObject"}
    if key and method in object_actions and not set(query) - {"partNumber", "versionId"}:
        return object_actions[method], f"arn:aws:s3:::{bucket}/{key}", {}
    raise AssertionError(f"no IAM mapping for {method} {path}: add it here and to tasks/planning/iam.py")


def allowed(policy: dict, action: str, resource: str, context: dict) -> bool:
    """IAM's evaluation for Allow-only policies: an action, resource and StringLike conditions that match."""
    for s in policy["Statement"]:
        if s["Effect"] != "Allow" or not any(fnmatch.fnmatchcase(action, a) for a in s["Action"]):
            continue
        resources = s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]]
        if not any(fnmatch.fnmatchcase(resource, r) for r in resources):
            continue
        likes = s.get("Condition", {}).get("StringLike", {})
        if all(k in context and any(fnmatch.fnmatchcase(context[k], p) for p in v) for k, v in likes.items()):
            return True
    return False


def test_the_manifest_and_the_node_stager_send_only_requests_the_policy_allows(
        tmp_path, s3_sandbox, s3_env, s3_proxy, monkeypatch):
    uri, prefix = upload(s3_sandbox, {"model-00001.safetensors": shard(1, "a"), "config.json": b'{"layers": 2}'})
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_proxy.endpoint)
    store = WeightStore(s3_client(s3_sandbox.region))
    write_hash_file(store, uri)
    manifest = manifest_for(store, uri)
    code, _ = run(tmp_path / "dest", manifest.to_json(), node_env(s3_sandbox, s3_proxy.endpoint))
    assert code == 0

    requests = [(m, p, ranged, iam_request(m, p)) for m, p, ranged in s3_proxy.seen]
    made = {action for *_, (action, _, _) in requests}
    assert made == {"s3:ListBucket", "s3:GetObject", "s3:PutObject"}
    assert any(ranged for _, _, ranged, _ in requests), "the stager's ranged GETs were not seen"
    assert any(m == "HEAD" for m, *_ in requests)
    policy = iam.policy(weights_uri=uri)
    denied = [f"{m} {p} -> {a} on {r} {c}" for m, p, _, (a, r, c) in requests if not allowed(policy, a, r, c)]
    assert not denied, "not allowed by `pdlift iam-policy`:\n" + "\n".join(denied)
    # and the policy is scoped, not open: the same calls elsewhere are refused
    bucket = s3_sandbox.bucket
    assert not allowed(policy, "s3:PutObject", f"arn:aws:s3:::{bucket}/{prefix}model-00001.safetensors", {})
    assert not allowed(policy, "s3:GetObject", f"arn:aws:s3:::{bucket}/elsewhere/x", {})
    assert not allowed(policy, "s3:ListBucket", f"arn:aws:s3:::{bucket}", {"s3:prefix": "elsewhere/"})
    assert not allowed(policy, "s3:ListBucket", f"arn:aws:s3:::{bucket}", {})
