"""Weight staging's pure rules at their edges (``tasks.planning.staging``): bucket names, folder
markers, which checksum a node verifies, safetensors headers that just fit, and the per-node plan's
margin, warnings and time limit."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest

from tasks.errors import ConfigError, StageFailed, WeightVerificationFailed
from tasks.planning.staging import (
    HASH_FILE, SAFETENSORS_MAX_HEADER, ListedObject, Manifest, ManifestEntry, NodeProbe, build_manifest,
    check_safetensors_header, hash_file_document, plan_staging, relative_path, safetensors_header_length,
    split_s3_uri, stage_timeout_s, streams_needed,
)

SHA = hashlib.sha256(b"x").hexdigest()
CRC = "00112233aabbccdd"


def b64(hexdigest: str) -> str:
    return base64.b64encode(bytes.fromhex(hexdigest)).decode()


def listed(key: str, size: int = 10, etag: str = '"e1"', **kw) -> ListedObject:
    return ListedObject(key, size, etag, **kw)


# --- S3 names ----------------------------------------------------------------------------------


@pytest.mark.parametrize("uri", ["s3://ab/m/", "s3://Weights/m/", "s3://weights-/m/", "s3://-weights/m/", "s3:///m/"])
def test_a_bucket_name_s3_would_refuse_is_refused_naming_it(uri):
    with pytest.raises(ConfigError, match="is not a valid bucket name"):
        split_s3_uri(uri)


def test_a_uri_that_is_not_s3_says_what_one_looks_like():
    with pytest.raises(ConfigError, match=r"is not an s3:// URI \(hint: s3://bucket/prefix/\)"):
        split_s3_uri("S3://weights/m/")


def test_a_bucket_without_a_prefix_and_a_nested_prefix_split_as_they_read():
    assert split_s3_uri("s3://weights") == ("weights", "")
    assert split_s3_uri("s3://weights/a/b") == ("weights", "a/b/")
    assert split_s3_uri("s3://weights/a/b/") == ("weights", "a/b/")


def test_a_key_with_a_nul_byte_is_refused_and_a_nested_key_keeps_its_folders():
    with pytest.raises(ConfigError, match="safe path"):
        relative_path("m/a\x00b", "m/")
    assert relative_path("m/d/e/a.bin", "m/") == "d/e/a.bin"
    assert relative_path("a.bin", "") == "a.bin"


# --- the manifest ------------------------------------------------------------------------------


def test_folder_markers_are_not_staged():
    manifest = build_manifest("b", "m/", [listed("m/d/", checksum_sha256=b64(SHA)),
                                          listed("m/d/a.bin", checksum_sha256=b64(SHA))], None)
    assert [e.key for e in manifest.entries] == ["m/d/a.bin"]


def test_a_full_object_checksum_from_an_older_store_without_a_type_is_used():
    manifest = build_manifest("b", "m/", [listed("m/a.bin", checksum_sha256=b64(SHA), checksum_type=None)], None)
    assert manifest.entries[0].sha256 == SHA and manifest.entries[0].checksum_source == "s3"


@pytest.mark.parametrize("kw", [dict(checksum_sha256=b64(SHA), checksum_type="COMPOSITE"),
                                dict(checksum_sha256=b64(SHA) + "-2", checksum_type="FULL_OBJECT"),
                                dict(checksum_crc64nvme=b64(CRC), checksum_type="COMPOSITE"),
                                dict(checksum_sha256="", checksum_type="FULL_OBJECT")])
def test_composite_or_empty_checksums_are_no_full_object_checksum(kw):
    with pytest.raises(ConfigError, match="no full-object checksum for m/a.bin"):
        build_manifest("b", "m/", [listed("m/a.bin", **kw)], None)


def test_an_object_with_only_s3s_crc_takes_the_hash_files_sha256_beside_it():
    doc = hash_file_document("s3://b/m/", {"m/a.bin": (10, '"e1"', "cd" * 32)})
    (entry,) = build_manifest("b", "m/", [listed("m/a.bin", checksum_crc64nvme=b64(CRC))], doc).entries
    assert (entry.sha256, entry.crc64nvme, entry.checksum_source) == ("cd" * 32, CRC, HASH_FILE)


def test_a_hash_file_record_matches_whether_or_not_its_etag_is_quoted():
    doc = hash_file_document("s3://b/m/", {"m/a.bin": (10, "e1", SHA)})
    (entry,) = build_manifest("b", "m/", [listed("m/a.bin", etag='"e1"')], doc).entries
    assert entry.sha256 == SHA


def test_a_hash_file_record_of_another_size_is_stale():
    doc = hash_file_document("s3://b/m/", {"m/a.bin": (11, '"e1"', SHA)})
    with pytest.raises(ConfigError, match=r"s3://b/m/pdlift-manifest.json is stale for m/a.bin \(size or ETag "
                                          r"changed\); run `pdlift weights manifest s3://b/m/` again"):
        build_manifest("b", "m/", [listed("m/a.bin")], doc)


def test_a_long_list_of_keys_shows_five_and_counts_the_rest():
    objects = [listed(f"m/{i}.bin") for i in range(8)]
    with pytest.raises(ConfigError) as caught:
        build_manifest("b", "m/", objects, None)
    assert "m/0.bin, m/1.bin, m/2.bin, m/3.bin, m/4.bin and 3 more in s3://b/m/" in str(caught.value)
    with pytest.raises(ConfigError) as five:
        build_manifest("b", "m/", objects[:5], None)
    assert "m/4.bin in s3://b/m/" in str(five.value) and "more" not in str(five.value)


def test_stale_records_are_reported_before_missing_checksums():
    doc = hash_file_document("s3://b/m/", {"m/a.bin": (99, '"e1"', SHA)})
    with pytest.raises(ConfigError, match="stale for m/a.bin"):
        build_manifest("b", "m/", [listed("m/a.bin"), listed("m/b.bin")], doc)


def test_the_hash_file_document_lists_each_key_with_size_etag_and_sha256_in_key_order():
    assert hash_file_document("s3://b/m/", {"m/b": (2, '"e2"', "bb"), "m/a": (1, '"e1"', "aa")}) == {
        "version": 1, "source": "s3://b/m/", "algorithm": "sha256",
        "objects": {"m/a": {"size": 1, "etag": '"e1"', "sha256": "aa"},
                    "m/b": {"size": 2, "etag": '"e2"', "sha256": "bb"}}}
    assert list(hash_file_document("s3://b/m/", {"m/b": (2, "e", "b"), "m/a": (1, "e", "a")})["objects"]) == \
        ["m/a", "m/b"]


def test_a_manifest_of_another_version_is_refused_naming_it():
    text = json.dumps({"version": 2, "bucket": "b", "prefix": "m/", "objects": []})
    with pytest.raises(ConfigError, match="manifest version 2 is not 1"):
        Manifest.from_json(text)


def test_a_manifest_counts_its_bytes_and_names_its_uri():
    m = Manifest("b", "m/", (ManifestEntry("m/a", "a", 3, "e"), ManifestEntry("m/b", "b", 4, "e")))
    assert (m.uri, m.total_bytes) == ("s3://b/m/", 7)


# --- safetensors -------------------------------------------------------------------------------


def header(doc: dict) -> bytes:
    return json.dumps(doc).encode()


def test_a_header_that_exactly_fills_the_file_fits():
    assert safetensors_header_length("k", (10).to_bytes(8, "little"), 18) == 10
    with pytest.raises(WeightVerificationFailed, match="k: safetensors header length 10 does not fit the 17-byte"):
        safetensors_header_length("k", (10).to_bytes(8, "little"), 17)


def test_a_header_at_the_crates_limit_fits_and_one_byte_more_does_not():
    big = 1 << 40
    assert safetensors_header_length("k", SAFETENSORS_MAX_HEADER.to_bytes(8, "little"), big) == SAFETENSORS_MAX_HEADER
    with pytest.raises(WeightVerificationFailed, match="does not fit"):
        safetensors_header_length("k", (SAFETENSORS_MAX_HEADER + 1).to_bytes(8, "little"), big)


def test_an_empty_header_or_a_file_of_eight_bytes_is_not_safetensors():
    with pytest.raises(WeightVerificationFailed, match="header length 0"):
        safetensors_header_length("k", (0).to_bytes(8, "little"), 100)
    with pytest.raises(WeightVerificationFailed, match="k: 7 bytes is too short"):
        safetensors_header_length("k", b"\0" * 8, 7)
    assert safetensors_header_length("k", (1).to_bytes(8, "little") + b"{", 9) == 1


def test_tensors_that_touch_end_to_end_do_not_overlap():
    doc = header({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                  "b": {"dtype": "U8", "shape": [4], "data_offsets": [4, 8]}})
    assert check_safetensors_header("k", doc, 8 + len(doc) + 8) == 2


def test_metadata_of_strings_or_null_is_accepted_and_not_counted_as_a_tensor():
    for meta in ({"format": "pt"}, None):
        doc = header({"__metadata__": meta, "a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}})
        assert check_safetensors_header("k", doc, 8 + len(doc) + 2) == 1
    for bad in (["pt"], {"format": 1}):
        doc = header({"__metadata__": bad})
        with pytest.raises(WeightVerificationFailed, match="k: __metadata__ must map strings to strings"):
            check_safetensors_header("k", doc, 8 + len(doc))


def test_a_header_that_is_json_but_not_an_object_is_refused():
    with pytest.raises(WeightVerificationFailed, match="k: safetensors header is not a JSON object"):
        check_safetensors_header("k", b"[1, 2]", 100)


@pytest.mark.parametrize("info", [
    {"dtype": "U8", "shape": [2], "data_offsets": [0, 1, 2]},
    {"dtype": "U8", "shape": [2.0], "data_offsets": [0, 2]},
    {"dtype": "U8", "shape": [True], "data_offsets": [0, 1]},
    {"dtype": "U8", "shape": [2], "data_offsets": [0, "2"]},
    {"dtype": 8, "shape": [2], "data_offsets": [0, 2]},
    {"dtype": "U8", "shape": 2, "data_offsets": [0, 2]},
    {"dtype": "U8", "shape": [2], "data_offsets": {"0": 2}},
    "U8",
])
def test_a_tensor_entry_without_a_dtype_an_integer_shape_and_two_offsets_is_refused(info):
    doc = header({"t": info})
    with pytest.raises(WeightVerificationFailed, match="k: tensor 't' lacks dtype, shape or data_offsets"):
        check_safetensors_header("k", doc, 8 + len(doc) + 2)


@pytest.mark.parametrize("offsets, shape", [([2, 1], [0]), ([0, 3], [3]), ([-1, 1], [2]), ([0, 0], [-1])])
def test_offsets_outside_the_data_section_or_a_negative_dimension_are_refused(offsets, shape):
    doc = header({"t": {"dtype": "U8", "shape": shape, "data_offsets": offsets}})
    with pytest.raises(WeightVerificationFailed, match=r"k: tensor 't' data_offsets \[.*\] fall outside the 2-byte"):
        check_safetensors_header("k", doc, 8 + len(doc) + 2)


def test_a_dtype_of_unknown_width_is_only_held_to_its_offsets():
    doc = header({"t": {"dtype": "F4_E2M1", "shape": [8], "data_offsets": [0, 2]}})
    assert check_safetensors_header("k", doc, 8 + len(doc) + 2) == 1


def test_a_tensor_whose_shape_needs_other_bytes_than_its_offsets_give_is_named_with_both():
    doc = header({"t": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 10]}})
    with pytest.raises(WeightVerificationFailed, match=r"k: tensor 't' shape \[2, 3\] x 2 B does not match its "
                                                       r"10 bytes"):
        check_safetensors_header("k", doc, 8 + len(doc) + 12)


# --- the per-node plan -------------------------------------------------------------------------


def manifest(sha: bool = True) -> Manifest:
    obj = listed("m/a.bin", 1000, checksum_sha256=b64(SHA)) if sha else listed("m/a.bin", 1000,
                                                                                checksum_crc64nvme=b64(CRC))
    return build_manifest("b", "m/", [obj], None)


def test_a_node_with_exactly_the_bytes_plus_margin_free_is_enough():
    plan = plan_staging(manifest(), [NodeProbe("i-a", 1050, 1000, 0)], margin=0.05, concurrency=8)
    assert plan.total_bytes == 1000 and [n.free_bytes for n in plan.nodes] == [1050]
    with pytest.raises(StageFailed, match=r"i-a: needs 0.00 GB free for the weights \(incl. 5% margin\), has "
                                          r"0.00 GB; free space on the NVMe or use a larger volume"):
        plan_staging(manifest(), [NodeProbe("i-a", 1049, 1000, 0)], margin=0.05, concurrency=8)


def test_the_margin_is_rounded_up_to_a_whole_byte():
    plan = plan_staging(manifest(), [NodeProbe("i-a", 1001, 1001, 0)], margin=0.0, concurrency=8)
    assert [(n.node, n.fetch_bytes) for n in plan.nodes] == [("i-a", 1001)]
    with pytest.raises(StageFailed):
        plan_staging(manifest(), [NodeProbe("i-a", 1001, 1001, 0)], margin=0.0001, concurrency=8)


def test_a_sha256_manifest_needs_no_crc_on_any_node():
    plan = plan_staging(manifest(sha=True), [NodeProbe("i-a", 10_000, 1000, 0, ())], margin=0.05, concurrency=8)
    assert [n.node for n in plan.nodes] == ["i-a"] and plan.warnings == ()


def test_a_node_that_cannot_verify_crc64nvme_is_told_how_to_add_sha256():
    with pytest.raises(StageFailed, match=r"i-a: cannot verify CRC64NVME checksums \(no awscrt on the node\); "
                                          r"run `pdlift weights manifest s3://b/m/` to add SHA-256"):
        plan_staging(manifest(sha=False), [NodeProbe("i-a", 10_000, 1000, 0, ("sha256",))], 0.05, 8)


def test_concurrency_that_just_fills_the_line_rate_draws_no_warning_and_one_less_does():
    assert not plan_staging(manifest(), [NodeProbe("i-a", 10_000, 1000, 0)], 0.05, 20, line_rate_gbps=100).warnings
    (warning,) = plan_staging(manifest(), [NodeProbe("i-a", 10_000, 1000, 0)], 0.05, 19, line_rate_gbps=100).warnings
    assert warning == ("staging.concurrency 19 is below the 20 streams needed to fill 100 Gbps at 5 Gbps per flow")
    assert not plan_staging(manifest(), [NodeProbe("i-a", 10_000, 1000, 0)], 0.05, 1, line_rate_gbps=None).warnings


def test_streams_needed_round_up_and_never_fall_below_one():
    assert streams_needed(10) == 2 and streams_needed(10.5) == 3 and streams_needed(0) == 1
    assert streams_needed(100, per_flow_gbps=25) == 4


def test_a_probe_event_reads_its_byte_counts_and_defaults_to_sha256():
    assert NodeProbe.from_event("i-a", {"free_bytes": "10", "needed_bytes": 5, "present_bytes": 1}) == \
        NodeProbe("i-a", 10, 5, 1, ("sha256",))
    assert NodeProbe.from_event("i-a", {"free_bytes": 10, "needed_bytes": 5, "present_bytes": 1,
                                        "algorithms": ["sha256", "crc64nvme"]}).algorithms == ("sha256", "crc64nvme")


@pytest.mark.parametrize("event", [{"free_bytes": 10, "needed_bytes": 5}, {"free_bytes": "ten", "needed_bytes": 5,
                                                                          "present_bytes": 0}, None])
def test_a_probe_answer_without_its_byte_counts_fails_naming_the_node(event):
    with pytest.raises(StageFailed, match="i-a: the stager's probe answered .*; expected free_bytes, needed_bytes "
                                          "and present_bytes"):
        NodeProbe.from_event("i-a", event)


def test_a_node_may_stage_for_15_minutes_plus_the_time_50_mb_s_takes():
    assert stage_timeout_s(0) == 900.0
    assert stage_timeout_s(750_000_000_000) == 900.0 + 15_000.0
    assert stage_timeout_s(100, floor_s=1.0, slowest_bps=50.0) == 3.0


# --- more boundaries ---------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["m/a//b.bin", "m/a/", "m/a/./b"])
def test_an_empty_or_dot_segment_inside_a_key_is_refused_with_the_fix(key):
    with pytest.raises(ConfigError) as caught:
        relative_path(key, "m/")
    assert str(caught.value) == (f"object key {key!r} does not map to a safe path below 'm/'; rename the object "
                                 "(no empty, '.' or '..' path segments)")


def test_the_hash_file_and_folder_markers_among_the_objects_skip_only_themselves():
    objects = [listed("m/a.bin", checksum_sha256=b64(SHA)), listed(f"m/{HASH_FILE}"), listed("m/d/"),
               listed("m/d/z.bin", checksum_sha256=b64(SHA)), listed("m/z.bin", checksum_sha256=b64(SHA))]
    assert [e.key for e in build_manifest("b", "m/", objects, None).entries] == ["m/a.bin", "m/d/z.bin", "m/z.bin"]


def test_every_stale_record_is_named_not_only_the_first():
    doc = hash_file_document("s3://b/m/", {"m/a.bin": (99, '"e1"', SHA), "m/b.bin": (99, '"e1"', SHA)})
    with pytest.raises(ConfigError, match="stale for m/a.bin, m/b.bin "):
        build_manifest("b", "m/", [listed("m/a.bin"), listed("m/b.bin")], doc)


def test_a_manifest_entry_carries_what_the_stager_checks_the_object_against():
    obj = listed("m/d/a.bin", 10, '"e1"', version_id="v7", checksum_sha256=b64(SHA), checksum_crc64nvme=b64(CRC),
                 checksum_type="FULL_OBJECT")
    (entry,) = build_manifest("b", "m/", [obj], None).entries
    assert entry == ManifestEntry("m/d/a.bin", "d/a.bin", 10, '"e1"', "v7", SHA, CRC, "s3")


def test_a_hash_file_record_without_an_etag_matches_an_object_listed_without_one():
    doc = {"objects": {"m/a.bin": {"size": 10, "sha256": SHA}}}
    (entry,) = build_manifest("b", "m/", [listed("m/a.bin", etag="")], doc).entries
    assert entry.sha256 == SHA


def test_an_eight_byte_file_is_refused_for_its_header_length():
    with pytest.raises(WeightVerificationFailed) as caught:
        safetensors_header_length("k", (2).to_bytes(8, "little"), 8)
    assert str(caught.value) == ("k: safetensors header length 2 does not fit the 8-byte object (truncated or not "
                                 "safetensors)")


def test_an_empty_tensor_is_a_valid_tensor():
    doc = header({"e": {"dtype": "F32", "shape": [0, 4], "data_offsets": [4, 4]},
                  "a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}})
    assert check_safetensors_header("k", doc, 8 + len(doc) + 4) == 2


def test_a_size_mismatch_names_the_bytes_between_the_offsets():
    doc = header({"t": {"dtype": "BF16", "shape": [2], "data_offsets": [2, 8]}})
    with pytest.raises(WeightVerificationFailed, match=r"shape \[2\] x 2 B does not match its 6 bytes$"):
        check_safetensors_header("k", doc, 8 + len(doc) + 8)


def test_a_refused_plan_lists_every_node_on_its_own_line():
    with pytest.raises(StageFailed) as caught:
        plan_staging(manifest(sha=False), [NodeProbe("i-a", 10, 1000, 0, ("sha256",)),
                                           NodeProbe("i-b", 10_000, 1000, 0, ("sha256",))], 0.05, 8)
    assert str(caught.value) == (
        "weight staging refused before downloading anything:\n"
        "  i-a: needs 0.00 GB free for the weights (incl. 5% margin), has 0.00 GB; free space on the NVMe or use a "
        "larger volume\n"
        "  i-a: cannot verify CRC64NVME checksums (no awscrt on the node); run `pdlift weights manifest s3://b/m/` "
        "to add SHA-256\n"
        "  i-b: cannot verify CRC64NVME checksums (no awscrt on the node); run `pdlift weights manifest s3://b/m/` "
        "to add SHA-256")


def test_the_plan_keeps_each_nodes_bytes_to_fetch_present_and_free():
    plan = plan_staging(manifest(), [NodeProbe("i-a", 10_000, 600, 400)], 0.05, 8)
    assert [(n.node, n.fetch_bytes, n.present_bytes, n.free_bytes) for n in plan.nodes] == [("i-a", 600, 400, 10_000)]


def test_free_space_is_shown_in_gigabytes_of_10_to_the_9_bytes():
    with pytest.raises(StageFailed, match=r"has 1.01 GB"):
        plan_staging(manifest(), [NodeProbe("i-a", 1_005_000_001, 2_000_000_000, 0)], 0.0, 8)
