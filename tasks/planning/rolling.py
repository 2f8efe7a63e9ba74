"""What a ``rolling`` update does, in order, and what it applies at each step. Pure.

Decode first, its P->D path proven by a canary, then prefill (``../shared/reference/fleet-updates.md``,
B: "decode, gate the P->D path, then prefill"). Where the engine caches its peer's transfer
agent, decode restarts after a prefill restart: llm-d's vLLM operations guide says to
"proactively restart any decode replica that was connected to a restarted prefill pod" (a stale
NIXL agent cache); Mooncake and SGLang's connectors handshake per transfer and need no restart.
"""

from __future__ import annotations

from dataclasses import dataclass

from blueprints.schema import Blueprint
from tasks.errors import ConfigError
from tasks.planning.manifests.common import DECODE, PREFILL, REVISION_LABEL
from tasks.planning.manifests.pods import LWS_API

ROLES = (DECODE, PREFILL)  # the order a rolling update replaces them in
__all__ = ["DECODE", "LWS_API", "PREFILL", "ROLES", "Step", "decode_restart_reason", "revision_of", "role_object", "steps"]


@dataclass(frozen=True)
class Step:
    action: str  # roll | restart
    role: str


def decode_restart_reason(bp: Blueprint) -> str:
    """Why decode must restart after prefill did ('' when it need not)."""
    if bp.engine.name == "vllm" and bp.kv_transfer.connector == "nixl":
        return ("vLLM's NixlConnector keeps the prefill's NIXL agent metadata from its handshake; a restarted "
                "prefill has a new agent, so decode restarts too (llm-d: restart any decode replica connected "
                "to a restarted prefill pod)")
    return ""


def steps(bp: Blueprint) -> list[Step]:
    out = [Step("roll", DECODE), Step("roll", PREFILL)]
    if decode_restart_reason(bp):
        out.append(Step("restart", DECODE))
    return out


def role_object(objects: list[dict], role: str) -> dict:
    """The role's LeaderWorkerSet among rendered (or snapshotted) objects."""
    found = [o for o in objects if o.get("kind") == "LeaderWorkerSet" and o["metadata"]["name"] == role]
    if len(found) != 1:
        raise ConfigError(f"expected one {role} LeaderWorkerSet among the manifests, found {len(found)}")
    return found[0]


def revision_of(lws: dict) -> str:
    return ((lws.get("metadata") or {}).get("labels") or {}).get(REVISION_LABEL, "")
