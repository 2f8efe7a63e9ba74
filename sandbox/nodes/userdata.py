"""Read the nodeadm user data of an EKS AL2023 node the way nodeadm does, to know what the node
registers with: a MIME multipart document whose `application/node.eks.aws` part holds a
NodeConfig (YAML). Labels come from the kubelet flag `--node-labels=a=b,c=d`, taints from
`--register-with-taints=k=v:Effect` and from the kubelet config's `registerWithTaints`.

User data may arrive base64-encoded (as RunInstances carries it) or as a bare NodeConfig.
"""

from __future__ import annotations

import base64
import binascii
import email
import email.policy
from dataclasses import dataclass, field

import yaml

NODECONFIG_TYPE = "application/node.eks.aws"


class UserDataError(ValueError):
    """The user data names a NodeConfig that cannot be read."""


@dataclass
class NodeJoin:
    cluster: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, str]] = field(default_factory=list)
    max_pods: int | None = None


def _text(user_data: str | bytes) -> str:
    raw = user_data.encode() if isinstance(user_data, str) else user_data
    stripped = raw.strip()
    if stripped and not stripped.startswith((b"MIME", b"Content-", b"---", b"apiVersion", b"#")):
        try:
            decoded = base64.b64decode(stripped, validate=True)
            return decoded.decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            pass
    return raw.decode("utf-8", errors="replace")


def _nodeconfig_docs(text: str) -> list[str]:
    if text.lstrip().startswith(("MIME", "Content-")):
        message = email.message_from_string(text, policy=email.policy.compat32)
        parts = message.walk() if message.is_multipart() else [message]
        return [
            part.get_payload(decode=True).decode("utf-8")
            for part in parts
            if part.get_content_type() == NODECONFIG_TYPE and not part.is_multipart()
        ]
    return [text] if "NodeConfig" in text else []


def _flag_values(flags: list[str], name: str) -> list[str]:
    values = []
    for i, flag in enumerate(flags):
        if flag.startswith(f"{name}="):
            values.append(flag.split("=", 1)[1])
        elif flag == name and i + 1 < len(flags):
            values.append(flags[i + 1])
    return values


def _taint(text: str) -> dict[str, str]:
    keyval, _, effect = text.strip().rpartition(":")
    key, _, value = keyval.partition("=")
    if not key or effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
        raise UserDataError(f"bad taint {text!r}: expected key[=value]:NoSchedule|PreferNoSchedule|NoExecute")
    taint = {"key": key, "effect": effect}
    if value:
        taint["value"] = value
    return taint


def parse_user_data(user_data: str | bytes | None) -> NodeJoin | None:
    """What the node joins with, or None when the user data has no NodeConfig (the node does not join)."""
    if not user_data:
        return None
    for doc_text in _nodeconfig_docs(_text(user_data)):
        try:
            docs = [d for d in yaml.safe_load_all(doc_text) if isinstance(d, dict)]
        except yaml.YAMLError as exc:
            raise UserDataError(f"NodeConfig is not valid YAML: {exc}") from exc
        for doc in docs:
            if doc.get("kind") != "NodeConfig":
                continue
            spec = doc.get("spec") or {}
            kubelet = spec.get("kubelet") or {}
            flags = [str(f) for f in kubelet.get("flags") or []]
            config = kubelet.get("config") or {}
            join = NodeJoin(cluster=(spec.get("cluster") or {}).get("name"))
            for value in _flag_values(flags, "--node-labels"):
                for pair in filter(None, value.split(",")):
                    key, _, val = pair.partition("=")
                    join.labels[key.strip()] = val.strip()
            for value in _flag_values(flags, "--register-with-taints"):
                join.taints += [_taint(t) for t in value.split(",") if t.strip()]
            for taint in config.get("registerWithTaints") or []:
                join.taints.append({k: str(v) for k, v in taint.items() if k in ("key", "value", "effect")})
            if config.get("maxPods") is not None:
                join.max_pods = int(config["maxPods"])
            return join
    return None
