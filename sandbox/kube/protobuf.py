"""Request bodies in Kubernetes' protobuf encoding, decoded to the JSON form the store holds.

Why: kubectl's typed clients (``kubectl create namespace|configmap|secret|deployment|...``,
``kubectl run``) POST ``Content-Type: application/vnd.kubernetes.protobuf``, and kubectl 1.37
never retries them as JSON: client-go falls back from a 415 only for CBOR
(``requestClientContentConfigProvider.UnsupportedMediaType`` in client-go rest/client.go). A
real apiserver decodes protobuf for every built-in type, so the stand-in must too.

The wire form (k8s.io/apimachinery runtime/serializer/protobuf): the magic ``k8s\\0``, then a
``runtime.Unknown`` {1: TypeMeta {1: apiVersion, 2: kind}, 2: raw object, 3: contentEncoding,
4: contentType}; the raw object is its Go struct as go-to-protobuf marshals it, field numbers from
the struct tags (``protoschema.py``, generated from them). Unknown field numbers are skipped, as
the generated Unmarshal code skips them. Response bodies stay JSON: kubectl's Accept lists
``application/json`` after protobuf.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import struct

from sandbox.kube import errors
from sandbox.kube.protoschema import SCHEMA

MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"
# (apiVersion, kind) -> message: the objects kubectl builds itself (protoschema_gen.ROOTS).
ROOTS = {("v1", "Namespace"): "core.Namespace", ("v1", "ConfigMap"): "core.ConfigMap",
         ("v1", "Secret"): "core.Secret", ("v1", "ServiceAccount"): "core.ServiceAccount",
         ("v1", "Service"): "core.Service", ("v1", "Pod"): "core.Pod",
         ("apps/v1", "Deployment"): "apps.Deployment"}
_ZERO = ("", 0, False, None, [], {})


def is_protobuf(content_type: str) -> bool:
    return content_type.split(";")[0].strip().lower() == MEDIA_TYPE


def decode(raw: bytes) -> dict:
    """The object in a protobuf request body, as its JSON form (apiVersion and kind included)."""
    if not raw.startswith(MAGIC):
        raise errors.bad_request("couldn't decode the request body: no Kubernetes protobuf envelope (k8s\\0)")
    try:
        envelope = _fields(raw[len(MAGIC):])
        type_meta = _fields(envelope.get(1, [b""])[-1])
        api_version, kind = (type_meta.get(n, [b""])[-1].decode() for n in (1, 2))
        key = ROOTS.get((api_version, kind))
        if key is None:
            raise errors.unsupported_media_type(
                f"{MEDIA_TYPE} for {api_version} {kind} (the sandbox decodes protobuf only for "
                f"{', '.join(sorted(k for _, k in ROOTS))}; send JSON)")
        return {"apiVersion": api_version, "kind": kind, **_message(envelope.get(2, [b""])[-1], key)}
    except (IndexError, ValueError, struct.error) as e:
        raise errors.bad_request(f"couldn't decode the protobuf request body: {e}") from e


def _varint(data: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = data[i]
        value |= (b & 0x7F) << shift
        i += 1
        if b < 0x80:
            return value, i
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def _fields(data: bytes) -> dict[int, list]:
    """Field number -> its values in order (varints as int, length-delimited as bytes)."""
    out: dict[int, list] = {}
    i = 0
    while i < len(data):
        tag, i = _varint(data, i)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, i = _varint(data, i)
        elif wire == 1:
            value, i = data[i:i + 8], i + 8
        elif wire == 2:
            n, i = _varint(data, i)
            value, i = data[i:i + n], i + n
            if i > len(data):
                raise ValueError("length-delimited field runs past the end")
        elif wire == 5:
            value, i = data[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wire} (groups are not used by Kubernetes)")
        out.setdefault(number, []).append(value)
    return out


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v  # int32/int64: two's complement in 10 bytes


def _value(kind: str, v):
    if kind == "string":
        return v.decode()
    if kind == "int":
        return _signed(v)
    if kind == "bool":
        return bool(v)
    if kind == "bytes":
        return base64.b64encode(v).decode()  # []byte is base64 in JSON
    if kind == "double":
        return struct.unpack("<d", v)[0]
    if kind == "float":
        return struct.unpack("<f", v)[0]
    if kind == "quantity":  # resource.Quantity {1: string}
        return _fields(v).get(1, [b""])[-1].decode()
    if kind == "intorstring":  # {1: type (0 int, 1 string), 2: intVal, 3: strVal}
        f = _fields(v)
        return f.get(3, [b""])[-1].decode() if f.get(1, [0])[-1] == 1 else _signed(f.get(2, [0])[-1])
    if kind == "time":  # metav1.Time as a Timestamp {1: seconds, 2: nanos}; a zero Time is empty
        f = _fields(v)
        if not f:
            return None
        when = dt.datetime.fromtimestamp(_signed(f.get(1, [0])[-1]), dt.timezone.utc)
        return when.strftime("%Y-%m-%dT%H:%M:%SZ")
    if kind in ("raw", "fieldsv1"):  # {1: raw JSON bytes}
        raw = _fields(v).get(1, [b""])[-1]
        return json.loads(raw) if raw else None
    if kind.startswith("map:"):
        raise AssertionError("maps are decoded by _message")
    if kind.startswith("msg:"):
        return _message(v, kind[4:])
    raise ValueError(f"no decoder for kind {kind!r}")


def _message(data: bytes, key: str) -> dict:
    table = SCHEMA[key]
    out: dict = {}
    for number, values in _fields(data).items():
        if number not in table:
            continue  # a newer client's field: skipped, as the generated Unmarshal skips it
        name, kind, flags = table[number]
        if kind.startswith("map:"):
            value = {}
            for entry in values:
                f = _fields(entry)
                value[f.get(1, [b""])[-1].decode()] = _value(kind[4:], f.get(2, [b""])[-1])
        elif "R" in flags and kind == "int" and any(isinstance(v, bytes) for v in values):
            value = []  # a packed repeated varint (proto3 writers; go-to-protobuf writes them unpacked)
            for v in values:
                i = 0
                while i < len(v):
                    n, i = _varint(v, i)
                    value.append(_signed(n))
        elif "R" in flags:
            value = [_value(kind, v) for v in values]
        else:
            value = _value(kind, values[-1])
        if "I" in flags:
            out.update(value)
        elif value is not None and not ("O" in flags and value in _ZERO):
            out[name] = value
    return out
