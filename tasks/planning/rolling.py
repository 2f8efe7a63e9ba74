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
from tasks.planning.manifests.common import DECODE, PREFILL, REVISION_LABEL, colour_namespace, stable_namespace
from tasks.planning.manifests.pods import LWS_API
from tasks.planning.manifests.router import router_name
from tasks.planning.records import Deployed, RoleRolled

ROLES = (DECODE, PREFILL)  # the order a rolling update replaces them in
__all__ = ["DECODE", "LWS_API", "PREFILL", "ROLES", "Step", "decode_restart_reason", "revert_steps", "revision_of",
           "role_object", "steps"]


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


def revert_steps(bp: Blueprint, roles: list[str]) -> list[Step]:
    """Back onto the snapshot (``bp``: its blueprint): ``roles`` in that order, then decode
    restarted when prefill was reverted after decode and the engine keeps its peer's agent."""
    out = [Step("roll", role) for role in roles]
    if PREFILL in roles and DECODE not in roles[roles.index(PREFILL):] and decode_restart_reason(bp):
        out.append(Step("restart", DECODE))
    return out


def deployed_after_roll(bp: Blueprint, colour: str, revision: str, rolled: list[RoleRolled], phases: dict[str, float],
                        canary_summary: str, before: Deployed | None, new_id: str) -> Deployed:
    """The deploy record of a rolled colour. A replay of the same update (after a suspension, or
    a cut-off run) keeps its generation, so the gate reuses its measurement; anything else gets
    ``<revision>-<new_id>``."""
    same = before is not None and before.colour == colour and before.generation.startswith(revision + "-")
    generation = before.generation if same else f"{revision}-{new_id}"
    steps = {f"roll_{r.role}" if r.from_revision != r.to_revision else f"restart_{r.role}": r.seconds for r in rolled}
    return Deployed(bp.name, colour, colour, colour_namespace(bp, colour), stable_namespace(bp), router_name(colour),
                    {**phases, **steps}, round(sum(r.seconds for r in rolled), 3), canary_summary, generation)


def deployed_after_revert(bp: Blueprint, colour: str, revision: str, rolled: list[RoleRolled], canary_summary: str,
                          new_id: str) -> Deployed:
    """The deploy record after a full revert: a generation of its own, so a later update of the
    same revision is measured afresh rather than judged by this one's cached verdict."""
    return Deployed(bp.name, colour, colour, colour_namespace(bp, colour), stable_namespace(bp), router_name(colour),
                    {f"revert_{r.role}": r.seconds for r in rolled}, round(sum(r.seconds for r in rolled), 3),
                    canary_summary, f"{revision}-{new_id}")


def role_object(objects: list[dict], role: str) -> dict:
    """The role's LeaderWorkerSet among rendered (or snapshotted) objects."""
    found = [o for o in objects if o.get("kind") == "LeaderWorkerSet" and o["metadata"]["name"] == role]
    if len(found) != 1:
        raise ConfigError(f"expected one {role} LeaderWorkerSet among the manifests, found {len(found)}")
    return found[0]


def revision_of(lws: dict) -> str:
    return ((lws.get("metadata") or {}).get("labels") or {}).get(REVISION_LABEL, "")
