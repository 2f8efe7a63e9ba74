"""Weight staging, pure parts: manifest, safetensors headers, per-node plan, progress."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tasks.errors import ConfigError, StageFailed, WeightVerificationFailed
from tasks.planning.staging import (HASH_FILE, ListedObject, Manifest, NodeProbe, build_manifest,
                                    check_safetensors_header, hash_file_document, plan_staging,
                                    relative_path, safetensors_header_length, split_s3_uri,
                                    streams_needed)
from tasks.planning.staging_progress import (ProgressBoard, failure_message, render_bar, throughput_rows,
                                             total)
from tests.sandbox.staging.safetensors_files import safetensors_bytes

SHA = hashlib.sha256(b"x").hexdigest()


def b64(hexdigest: str) -> str:
    return base64.b64encode(bytes.fromhex(hexdigest)).decode()


def listed(key: str, size: int = 10, etag: str = '"e1"', **kw) -> ListedObject:
    return ListedObject(key, size, etag, **kw)



# --- manifest -------------------------------------------------------------------------------


def test_manifest_takes_s3_full_object_checksums_first_and_the_hash_file_for_the_rest():
    objects = [listed("m/a.safetensors", checksum_sha256=b64(SHA), checksum_type="FULL_OBJECT"),
               listed("m/b.safetensors", etag='"e2"'),
               listed("m/c.bin", checksum_crc64nvme=b64("00112233aabbccdd"))]
    doc = hash_file_document("s3://b/m/", {"m/b.safetensors": (10, '"e2"', "ab" * 32)})
    manifest = build_manifest("b", "m/", objects, doc)
    by_key = {e.key: e for e in manifest.entries}
    assert (by_key["m/a.safetensors"].sha256, by_key["m/a.safetensors"].checksum_source) == (SHA, "s3")
    assert (by_key["m/b.safetensors"].sha256, by_key["m/b.safetensors"].checksum_source) == ("ab" * 32, HASH_FILE)
    assert by_key["m/c.bin"].crc64nvme == "00112233aabbccdd" and by_key["m/c.bin"].sha256 is None
    assert [e.path for e in manifest.entries] == ["a.safetensors", "b.safetensors", "c.bin"]


def test_manifest_refuses_objects_without_any_checksum_and_says_how_to_add_one():
    with pytest.raises(ConfigError, match=r"m/b.bin.*pdlift weights manifest s3://b/m/"):
        build_manifest("b", "m/", [listed("m/a.bin", checksum_sha256=b64(SHA)), listed("m/b.bin")], None)


def test_a_hash_file_record_for_an_object_that_changed_since_is_refused_as_stale():
    doc = hash_file_document("s3://b/m/", {"m/a.bin": (10, '"old"', SHA)})
    with pytest.raises(ConfigError, match=r"stale for m/a.bin"):
        build_manifest("b", "m/", [listed("m/a.bin", etag='"new"')], doc)


def test_composite_multipart_checksums_are_not_mistaken_for_full_object_ones():
    composite = listed("m/a.bin", checksum_sha256=b64(SHA) + "-3", checksum_type="COMPOSITE")
    with pytest.raises(ConfigError, match="no full-object checksum"):
        build_manifest("b", "m/", [composite], None)


def test_the_hash_file_itself_is_never_staged():
    doc = hash_file_document("s3://b/m/", {"m/a.bin": (10, '"e1"', SHA)})
    manifest = build_manifest("b", "m/", [listed("m/a.bin"), listed(f"m/{HASH_FILE}")], doc)
    assert [e.key for e in manifest.entries] == ["m/a.bin"]


def test_an_empty_prefix_is_a_config_error():
    with pytest.raises(ConfigError, match="no objects"):
        build_manifest("b", "m/", [], None)


def test_manifest_json_round_trips_and_carries_no_credentials():
    manifest = build_manifest("b", "m/", [listed("m/d/a.bin", version_id="v1", checksum_sha256=b64(SHA))], None)
    text = manifest.to_json()
    assert Manifest.from_json(text) == manifest
    assert set(json.loads(text)) == {"version", "bucket", "prefix", "objects"}


@pytest.mark.parametrize("key", ["m/../etc/passwd", "m//a", "m/./a", "m/", "other/a", "m/a/../../b"])
def test_keys_that_would_escape_or_blur_the_staging_directory_are_refused(key):
    with pytest.raises(ConfigError, match="safe path"):
        relative_path(key, "m/")


def test_s3_uris_split_into_bucket_and_a_slash_terminated_prefix():
    assert split_s3_uri("s3://pdlift-weights/tiny-moe-mla") == ("pdlift-weights", "tiny-moe-mla/")
    assert split_s3_uri("s3://pdlift-weights/") == ("pdlift-weights", "")
    with pytest.raises(ConfigError):
        split_s3_uri("https://pdlift-weights/x")


# --- safetensors ----------------------------------------------------------------------------


def _check(raw: bytes, size: int | None = None) -> int:
    size = len(raw) if size is None else size
    n = safetensors_header_length("m/s.safetensors", raw[:8], size)
    return check_safetensors_header("m/s.safetensors", raw[8:8 + n], size)


def test_a_valid_safetensors_header_passes():
    raw = safetensors_bytes({"a": ("F8_E4M3", [4, 8]), "b": ("F32", [3])})
    assert _check(raw) == 2


def _header(tensors: dict) -> bytes:
    body = json.dumps(tensors).encode()
    return len(body).to_bytes(8, "little") + body


@pytest.mark.parametrize("raw,size,match", [
    (_header({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}), None, "outside"),
    (_header({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}) + b"\0" * 8, None, "does not match"),
    (_header({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
              "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}) + b"\0" * 12, None, "overlap"),
    (_header({"a": {"shape": [2], "data_offsets": [0, 8]}}) + b"\0" * 8, None, "lacks dtype"),
    (_header({"__metadata__": {"k": 1}}), None, "__metadata__"),
    ((10).to_bytes(8, "little") + b"not json!!", None, "not JSON"),
    ((1 << 40).to_bytes(8, "little") + b"{}", None, "does not fit"),
    (b"\x01\x02", None, "too short"),
    (_header({}), 3, "too short"),
])
def test_safetensors_header_problems_fail_verification_naming_the_key(raw, size, match):
    with pytest.raises(WeightVerificationFailed, match=f"m/s.safetensors.*{match}"):
        _check(raw, size)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.integers(min_value=0, max_value=1 << 20))
def test_arbitrary_bytes_only_ever_fail_as_weight_verification(raw, extra):
    try:
        _check(raw, len(raw) + extra)
    except WeightVerificationFailed:
        pass


# --- per-node plan --------------------------------------------------------------------------


def _manifest(sha: bool = True) -> Manifest:
    obj = listed("m/a.bin", 1000, checksum_sha256=b64(SHA)) if sha else \
        listed("m/a.bin", 1000, checksum_crc64nvme=b64("00" * 8))
    return build_manifest("b", "m/", [obj], None)


def test_plan_refuses_every_node_without_room_before_anything_downloads():
    probes = [NodeProbe("i-ok", 10_000, 1000, 0), NodeProbe("i-small", 1020, 1000, 0),
              NodeProbe("i-tiny", 10, 1000, 0)]
    with pytest.raises(StageFailed, match="before downloading") as caught:
        plan_staging(_manifest(), probes, margin=0.05, concurrency=16)
    assert "i-small" in str(caught.value) and "i-tiny" in str(caught.value)
    assert "i-ok" not in str(caught.value)


def test_plan_counts_what_each_node_already_has():
    plan = plan_staging(_manifest(), [NodeProbe("i-a", 10_000, 0, 1000), NodeProbe("i-b", 10_000, 400, 600)],
                        margin=0.05, concurrency=16)
    assert [(n.node, n.fetch_bytes) for n in plan.nodes] == [("i-a", 0), ("i-b", 400)]
    assert plan.fetch_bytes == 400


def test_plan_refuses_crc64nvme_only_objects_on_nodes_that_cannot_compute_it():
    with pytest.raises(StageFailed, match="CRC64NVME"):
        plan_staging(_manifest(sha=False), [NodeProbe("i-a", 10_000, 1000, 0, ("sha256",))], 0.05, 16)
    plan_staging(_manifest(sha=False), [NodeProbe("i-a", 10_000, 1000, 0, ("sha256", "crc64nvme"))], 0.05, 16)


def test_plan_warns_when_concurrency_cannot_fill_the_line_rate():
    assert streams_needed(100) == 20 and streams_needed(3) == 1
    plan = plan_staging(_manifest(), [NodeProbe("i-a", 10_000, 1000, 0)], 0.05, 16, line_rate_gbps=100)
    assert plan.warnings and "20 streams" in plan.warnings[0]
    assert not plan_staging(_manifest(), [NodeProbe("i-a", 10_000, 1000, 0)], 0.05, 64, 100).warnings


# --- progress -------------------------------------------------------------------------------


def _event(**fields) -> str:
    return json.dumps(fields)


def test_progress_board_aggregates_nodes_and_totals():
    board = ProgressBoard(["i-a", "i-b"], bytes_total=1000, files_total=2)
    board.feed("i-a", _event(event="progress", bytes_done=500, bytes_total=1000, bytes_fetched=500,
                             files_done=1, files_total=2, rate_bps=100.0, elapsed_s=5.0))
    board.feed("i-b", _event(event="done", bytes_done=1000, bytes_total=1000, bytes_fetched=0,
                             files_done=2, files_total=2, rate_bps=0, elapsed_s=0.5))
    snap = board.snapshot()
    assert [p.state for p in snap] == ["staging", "done"]
    t = total(snap)
    assert (t.bytes_done, t.bytes_total, t.percent, t.state) == (1500, 2000, 75.0, "staging")
    rows = throughput_rows(snap)
    assert [r["node"] for r in rows] == ["i-a", "i-b", "total"] and rows[0]["files"] == "1/2"
    assert "75.0%" in render_bar(snap) and "nodes 1/2 done" in render_bar(snap)


def test_progress_board_ignores_lines_that_are_not_stager_events():
    board = ProgressBoard(["i-a"], 10, 1)
    for line in ["Welcome to Amazon Linux", "{not json", "[1, 2]", '{"no": "event"}', ""]:
        assert board.feed("i-a", line) is None
    assert board.snapshot()[0].state == "waiting" and board.version == 0


def test_a_failed_node_is_named_with_its_key_and_reason():
    board = ProgressBoard(["i-a", "i-b"], 10, 1)
    board.feed("i-a", _event(event="error", key="m/a.safetensors", reason="checksum-mismatch",
                             detail="sha256 expected 00, got 11"))
    board.fail("i-a", "verification failed", "exit 4")  # keeps the stager's own, more precise error
    board.fail("i-b", "unreachable", "no SSH answer")
    message = failure_message(board.snapshot())
    assert "i-a: m/a.safetensors: checksum-mismatch (sha256 expected 00, got 11)" in message
    assert "i-b: unreachable (no SSH answer)" in message
    assert total(board.snapshot()).state == "failed"
