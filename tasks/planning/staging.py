"""Weight staging, pure part: the manifest, safetensors header checks and the per-node plan.

The manifest is what every node's stager (``scripts/node/stage_weights.py``) downloads and
verifies against: one entry per S3 object with its size, ETag, VersionId and a full-object
checksum. Checksums come from S3 itself (a full-object SHA-256 or CRC64NVME) or, where S3 has
none, from ``pdlift-manifest.json`` beside the weights (SHA-256, written once by
``pdlift weights manifest``). A ``pdlift-manifest.json`` record whose size or ETag no longer
matches the object is stale and refused: it would make every node reject a good file.

No I/O here: the S3 adapter fetches, these functions decide.
"""

from __future__ import annotations

import base64
import json
import math
import posixpath
import re
from dataclasses import asdict, dataclass, field

from tasks.errors import ConfigError, StageFailed, WeightVerificationFailed

MANIFEST_VERSION = 1
HASH_FILE = "pdlift-manifest.json"  # written next to the weights; never staged to nodes
SAFETENSORS_MAX_HEADER = 100 << 20  # the safetensors crate refuses larger headers
SAFETENSORS_DTYPE_BYTES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8,
}
EC2_PER_FLOW_GBPS = 5.0  # a single flow outside a placement group (docs/sources.md#s3-per-flow-limit)
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")


@dataclass(frozen=True)
class ManifestEntry:
    """One object to stage. ``path`` is relative to the node's staging directory."""

    key: str
    path: str
    size: int
    etag: str
    version_id: str | None = None
    sha256: str | None = None  # hex
    crc64nvme: str | None = None  # hex of the 8-byte big-endian value
    checksum_source: str = ""  # "s3" or "pdlift-manifest.json"


@dataclass(frozen=True)
class Manifest:
    bucket: str
    prefix: str
    entries: tuple[ManifestEntry, ...]

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    @property
    def total_bytes(self) -> int:
        return sum(e.size for e in self.entries)

    def to_json(self) -> str:
        """The stager's input: stable, compact, no credentials (there are none to leak here)."""
        return json.dumps({"version": MANIFEST_VERSION, "bucket": self.bucket, "prefix": self.prefix,
                           "objects": [asdict(e) for e in self.entries]}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Manifest":
        doc = json.loads(text)
        if doc.get("version") != MANIFEST_VERSION:
            raise ConfigError(f"manifest version {doc.get('version')!r} is not {MANIFEST_VERSION}")
        return cls(doc["bucket"], doc["prefix"], tuple(ManifestEntry(**o) for o in doc["objects"]))


@dataclass(frozen=True)
class ListedObject:
    """What ListObjectsV2 + HeadObject(ChecksumMode=ENABLED) said about one object."""

    key: str
    size: int
    etag: str
    version_id: str | None = None
    checksum_sha256: str | None = None  # base64, as S3 returns it
    checksum_crc64nvme: str | None = None
    checksum_type: str | None = None  # FULL_OBJECT / COMPOSITE / None (older stores)


def split_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/prefix/`` -> (bucket, "prefix/"); the prefix always ends in "/" or is ""."""
    if not uri.startswith("s3://"):
        raise ConfigError(f"{uri!r} is not an s3:// URI (hint: s3://bucket/prefix/)")
    bucket, _, prefix = uri[5:].partition("/")
    if not _BUCKET.match(bucket):
        raise ConfigError(f"{uri!r}: {bucket!r} is not a valid bucket name")
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    return bucket, prefix


def relative_path(key: str, prefix: str) -> str:
    """The local path of ``key`` below the staging directory; refuses keys that would escape it."""
    rel = key[len(prefix):] if key.startswith(prefix) else ""
    parts = rel.split("/")
    if not rel or rel.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\x00" in rel:
        raise ConfigError(f"object key {key!r} does not map to a safe path below {prefix!r}; "
                          "rename the object (no empty, '.' or '..' path segments)")
    return posixpath.normpath(rel)


def _full_object(value: str | None, checksum_type: str | None) -> str | None:
    """A full-object checksum as hex, or None (composite multipart checksums end in '-N')."""
    if not value or "-" in value or checksum_type not in (None, "FULL_OBJECT"):
        return None
    return base64.b64decode(value).hex()


def build_manifest(bucket: str, prefix: str, objects: list[ListedObject],
                   hash_file: dict | None) -> Manifest:
    """Join the listing with S3 checksums and ``pdlift-manifest.json``; every object needs one.

    Raises:
        ConfigError: no objects, an object without any checksum, or a stale hash-file record
            (the message lists the keys and says to run ``pdlift weights manifest``).
    """
    records = (hash_file or {}).get("objects", {})
    entries, missing, stale = [], [], []
    for obj in sorted(objects, key=lambda o: o.key):
        if obj.key == prefix + HASH_FILE or obj.key.endswith("/"):
            continue
        sha = _full_object(obj.checksum_sha256, obj.checksum_type)
        crc = _full_object(obj.checksum_crc64nvme, obj.checksum_type)
        source = "s3" if sha or crc else ""
        rec = records.get(obj.key)
        if rec is not None and not sha:
            if rec.get("size") != obj.size or _etag(rec.get("etag")) != _etag(obj.etag):
                stale.append(obj.key)
                continue
            sha, source = rec["sha256"], HASH_FILE
        if not (sha or crc):
            missing.append(obj.key)
            continue
        entries.append(ManifestEntry(obj.key, relative_path(obj.key, prefix), obj.size, obj.etag,
                                     obj.version_id, sha, crc, source))
    uri = f"s3://{bucket}/{prefix}"
    if stale:
        raise ConfigError(f"{uri}{HASH_FILE} is stale for {_some(stale)} (size or ETag changed); "
                          f"run `pdlift weights manifest {uri}` again")
    if missing:
        raise ConfigError(f"no full-object checksum for {_some(missing)} in {uri}; "
                          f"run `pdlift weights manifest {uri}` to hash them once (SHA-256)")
    if not entries:
        raise ConfigError(f"no objects under {uri}; check model.weights_uri")
    return Manifest(bucket, prefix, tuple(entries))


def hash_file_document(uri: str, hashed: dict[str, tuple[int, str, str]]) -> dict:
    """The ``pdlift-manifest.json`` body: key -> size, ETag and SHA-256 (hex)."""
    return {"version": MANIFEST_VERSION, "source": uri, "algorithm": "sha256",
            "objects": {k: {"size": s, "etag": e, "sha256": h} for k, (s, e, h) in sorted(hashed.items())}}


def _etag(value: str | None) -> str:
    return (value or "").strip('"')


def _some(keys: list[str], limit: int = 5) -> str:
    shown = ", ".join(keys[:limit])
    return shown + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


# --- safetensors ------------------------------------------------------------------------


def safetensors_header_length(key: str, first8: bytes, size: int) -> int:
    """The JSON header length from the first 8 bytes (little-endian u64), checked against the size."""
    if size < 8 or len(first8) < 8:
        raise WeightVerificationFailed(f"{key}: {size} bytes is too short for a safetensors file")
    n = int.from_bytes(first8[:8], "little")
    if n == 0 or n > SAFETENSORS_MAX_HEADER or 8 + n > size:
        raise WeightVerificationFailed(f"{key}: safetensors header length {n} does not fit the "
                                       f"{size}-byte object (truncated or not safetensors)")
    return n


def check_safetensors_header(key: str, header: bytes, size: int) -> int:
    """Parse the JSON header; every tensor's data_offsets must fit the data section.

    Returns the number of tensors. Raises WeightVerificationFailed naming the key and tensor.
    """
    try:
        doc = json.loads(header.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise WeightVerificationFailed(f"{key}: safetensors header is not JSON ({e})") from e
    if not isinstance(doc, dict):
        raise WeightVerificationFailed(f"{key}: safetensors header is not a JSON object")
    data_bytes = size - 8 - len(header)
    spans = []
    for name, info in doc.items():
        if name == "__metadata__":
            if info is not None and not (isinstance(info, dict) and all(
                    isinstance(v, str) for v in info.values())):
                raise WeightVerificationFailed(f"{key}: __metadata__ must map strings to strings")
            continue
        spans.append(_tensor_span(key, name, info, data_bytes))
    spans.sort()
    for (b1, e1, n1), (b2, _, n2) in zip(spans, spans[1:]):
        if b2 < e1:
            raise WeightVerificationFailed(f"{key}: tensors {n1!r} and {n2!r} overlap")
    return len(spans)


def _tensor_span(key: str, name: str, info: object, data_bytes: int) -> tuple[int, int, str]:
    ok = isinstance(info, dict) and isinstance(info.get("dtype"), str) and isinstance(
        info.get("shape"), list) and isinstance(info.get("data_offsets"), list)
    offsets = info.get("data_offsets") if ok else None
    if not ok or len(offsets) != 2 or not all(type(v) is int for v in offsets + info["shape"]):
        raise WeightVerificationFailed(f"{key}: tensor {name!r} lacks dtype, shape or data_offsets")
    begin, end = offsets
    if not 0 <= begin <= end <= data_bytes or any(d < 0 for d in info["shape"]):
        raise WeightVerificationFailed(f"{key}: tensor {name!r} data_offsets [{begin}, {end}] fall "
                                       f"outside the {data_bytes}-byte data section")
    width = SAFETENSORS_DTYPE_BYTES.get(info["dtype"])
    if width is not None and math.prod(info["shape"]) * width != end - begin:
        raise WeightVerificationFailed(f"{key}: tensor {name!r} shape {info['shape']} x {width} B "
                                       f"does not match its {end - begin} bytes")
    return begin, end, name


# --- per-node plan ------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeProbe:
    """What the stager's ``probe`` reported for one node (one JSON line)."""

    node: str
    free_bytes: int
    needed_bytes: int
    present_bytes: int
    algorithms: tuple[str, ...] = ("sha256",)

    @classmethod
    def from_event(cls, node: str, event: dict) -> "NodeProbe":
        try:
            return cls(node, int(event["free_bytes"]), int(event["needed_bytes"]),
                       int(event["present_bytes"]), tuple(event.get("algorithms", ("sha256",))))
        except (KeyError, TypeError, ValueError) as e:
            raise StageFailed(f"{node}: the stager's probe answered {event!r}; expected free_bytes, "
                              "needed_bytes and present_bytes") from e


@dataclass(frozen=True)
class NodePlan:
    node: str
    fetch_bytes: int
    present_bytes: int
    free_bytes: int


@dataclass(frozen=True)
class StagingPlan:
    nodes: tuple[NodePlan, ...]
    total_bytes: int
    warnings: tuple[str, ...] = field(default=())

    @property
    def fetch_bytes(self) -> int:
        return sum(n.fetch_bytes for n in self.nodes)


def plan_staging(manifest: Manifest, probes: list[NodeProbe], margin: float,
                 concurrency: int, line_rate_gbps: float | None = None) -> StagingPlan:
    """Decide per node what must be fetched; refuse before anything downloads if a node can't take it.

    Raises:
        StageFailed: a node lacks free space (bytes needed x (1 + margin)) or cannot verify the
            manifest's checksum algorithm. The message names every such node.
    """
    problems = []
    # SHA-256 is in every Python; CRC64NVME only where the node has awscrt.
    needs = {"crc64nvme"} if any(not e.sha256 for e in manifest.entries) else set()
    for p in probes:
        want = math.ceil(p.needed_bytes * (1 + margin))
        if p.free_bytes < want:
            problems.append(f"{p.node}: needs {_gb(want)} free for the weights (incl. {margin:.0%} "
                            f"margin), has {_gb(p.free_bytes)}; free space on the NVMe or use a "
                            "larger volume")
        if not needs <= set(p.algorithms):
            problems.append(f"{p.node}: cannot verify CRC64NVME checksums (no awscrt on the node); "
                            f"run `pdlift weights manifest {manifest.uri}` to add SHA-256")
    if problems:
        raise StageFailed("weight staging refused before downloading anything:\n  " + "\n  ".join(problems))
    warnings = []
    if line_rate_gbps and concurrency < (streams := streams_needed(line_rate_gbps)):
        warnings.append(f"staging.concurrency {concurrency} is below the {streams} streams needed "
                        f"to fill {line_rate_gbps:g} Gbps at {EC2_PER_FLOW_GBPS:g} Gbps per flow")
    nodes = tuple(NodePlan(p.node, p.needed_bytes, p.present_bytes, p.free_bytes) for p in probes)
    return StagingPlan(nodes, manifest.total_bytes, tuple(warnings))


def streams_needed(line_rate_gbps: float, per_flow_gbps: float = EC2_PER_FLOW_GBPS) -> int:
    """Parallel TCP streams needed to reach the line rate when each flow is capped."""
    return max(1, math.ceil(line_rate_gbps / per_flow_gbps))


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB"


def stage_timeout_s(total_bytes: int, floor_s: float = 900.0, slowest_bps: float = 50e6) -> float:
    """How long one node's stager may run: generous (50 MB/s) so only a hung node trips it."""
    return floor_s + total_bytes / slowest_bps
