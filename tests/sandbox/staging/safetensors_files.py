"""Small, valid safetensors files for tests (the format: u64 LE header length, JSON, data)."""

from __future__ import annotations

import json
import math
import os

WIDTH = {"F8_E4M3": 1, "BF16": 2, "F32": 4}


def safetensors_bytes(tensors: dict[str, tuple[str, list[int]]], data: bytes | None = None,
                      metadata: dict[str, str] | None = None) -> bytes:
    """A safetensors file holding ``tensors`` (name -> (dtype, shape)); random data unless given."""
    header: dict = {"__metadata__": metadata or {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        size = math.prod(shape) * WIDTH[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)  # the format pads the header to 8 bytes
    body = data if data is not None else os.urandom(offset)
    return len(raw).to_bytes(8, "little") + raw + body


def shard(megabytes: float, name: str = "w") -> bytes:
    """One shard of about ``megabytes`` MB: a single FP8 tensor."""
    return safetensors_bytes({name: ("F8_E4M3", [int(megabytes * (1 << 20))])})
