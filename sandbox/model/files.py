"""The checkpoint's files: safetensors shards generated while read, index, config, tokenizer."""

from __future__ import annotations

import hashlib
import io
import json
import random
from dataclasses import dataclass
from pathlib import Path

from sandbox.model.layout import ModelShape, Tensor, all_tensors, config, plan_dims
from sandbox.model.tokenizer import tokenizer_config, tokenizer_json

BLOCK = 1 << 20  # PRNG block: the data stream does not depend on how callers read it
SEED_KEY = "pdlift-sandbox-seed"  # S3 object metadata: which seed produced the object


@dataclass(frozen=True)
class Shard:
    filename: str
    tensors: tuple[Tensor, ...]
    header: bytes  # the 8-byte length prefix and the JSON header, padded to 8 bytes

    @property
    def data_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    @property
    def size(self) -> int:
        return len(self.header) + self.data_bytes


def _header(tensors: list[Tensor], metadata: dict[str, str]) -> bytes:
    entries: dict[str, object] = {"__metadata__": metadata}
    offset = 0
    for t in tensors:
        entries[t.name] = {"dtype": t.dtype, "shape": list(t.shape),
                           "data_offsets": [offset, offset + t.nbytes]}
        offset += t.nbytes
    body = json.dumps(entries, separators=(",", ":")).encode()
    body += b" " * (-len(body) % 8)  # safetensors pads the header with spaces to 8 bytes
    return len(body).to_bytes(8, "little") + body


def plan_shards(tensors: list[Tensor], shard_bytes: int, seed: int) -> list[Shard]:
    groups: list[list[Tensor]] = [[]]
    size = 0
    for t in tensors:
        if groups[-1] and size + t.nbytes > shard_bytes:
            groups.append([])
            size = 0
        groups[-1].append(t)
        size += t.nbytes
    n = len(groups)
    meta = {"format": "pt", SEED_KEY: str(seed)}
    return [Shard(f"model-{i + 1:05d}-of-{n:05d}.safetensors", tuple(g), _header(g, meta))
            for i, g in enumerate(groups)]


class ShardStream(io.RawIOBase):
    """A shard's bytes, generated on read: header, then seeded random blocks."""

    def __init__(self, shard: Shard, seed: int):
        self._rng = random.Random(f"{seed}:{shard.filename}")
        self._left = shard.data_bytes
        self._pending = memoryview(shard.header)

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        if not self._pending and self._left:
            block = min(BLOCK, self._left)
            self._pending = memoryview(self._rng.randbytes(block))
            self._left -= block
        n = min(len(buf), len(self._pending))
        buf[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n


@dataclass(frozen=True)
class ModelFile:
    name: str
    size: int
    shard: Shard | None = None
    content: bytes = b""
    path: Path | None = None  # a real checkpoint's file on disk (directory_files)

    def open(self, seed: int) -> io.BufferedReader:
        if self.path is not None:
            return open(self.path, "rb")
        raw = ShardStream(self.shard, seed) if self.shard else io.BytesIO(self.content)
        return io.BufferedReader(raw, BLOCK)


def _json_file(name: str, obj: object) -> ModelFile:
    data = json.dumps(obj, indent=2).encode()
    return ModelFile(name, len(data), content=data)



def directory_files(folder: Path) -> tuple[list[ModelFile], int]:
    """A real checkpoint's files (the real-engine tier's converted model), in the synthetic one's
    order: weights first, ``config.json`` last (a checkpoint with a config.json is complete); hidden
    files (setup stamps) stay out. Returns them with a seed that names their content, so a re-upload
    skips exactly the objects already there with these bytes."""
    files = sorted((f for f in Path(folder).iterdir() if f.is_file() and not f.name.startswith(".")),
                   key=lambda f: (f.name == "config.json", not f.name.endswith(".safetensors"), f.name))
    if not any(f.name == "config.json" for f in files):
        raise FileNotFoundError(f"{folder} holds no config.json: not a checkpoint directory")
    digest = hashlib.sha256()
    for f in files:
        with open(f, "rb") as fh:
            while chunk := fh.read(BLOCK * 8):
                digest.update(chunk)
    return [ModelFile(f.name, f.stat().st_size, path=f) for f in files], int(digest.hexdigest()[:12], 16)


def model_files(shape: ModelShape = ModelShape(), size_mb: int = 256, seed: int = 0,
                shard_mb: int | None = None) -> list[ModelFile]:
    """Every file of the checkpoint, shards first and config.json last (written last, so a
    checkpoint with a config.json is complete)."""
    target = size_mb << 20
    dims = plan_dims(shape, target)
    tensors = all_tensors(shape, dims)
    shard_bytes = (shard_mb << 20) if shard_mb else max(64 << 20, target // 16)
    shards = plan_shards(tensors, shard_bytes, seed)
    index = {"metadata": {"total_size": sum(t.nbytes for t in tensors)},
             "weight_map": {t.name: s.filename for s in shards for t in s.tensors}}
    files = [ModelFile(s.filename, s.size, shard=s) for s in shards]
    files.append(_json_file("model.safetensors.index.json", index))
    files += [_json_file("tokenizer.json", tokenizer_json()),
              _json_file("tokenizer_config.json", tokenizer_config(shape.max_context))]
    files.append(_json_file("generation_config.json", {"eos_token_id": 256, "do_sample": False}))
    files.append(_json_file("config.json", config(shape, dims)))
    return files


