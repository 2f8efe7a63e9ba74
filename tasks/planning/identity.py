"""Who made a resource: the run identity, its tags, and deterministic idempotency tokens.

Every resource pdlift creates carries the tags below, so discovery, resume, teardown and the leak
sweep can find it without any local state. Client tokens are a hash of (deployment, run, stage,
AZ, count): the same request retried gets the same token, and a failover to another AZ gets a new
one, because EC2 returns the first AZ's result for a reused token when only the AZ differs
(docs/sources.md#client-token-az).

A token outlives what it made: the ledger (and so the run id and start time) outlives teardown.
Sent again after its resources are gone, EC2 replays the gone resource (a cancelled reservation)
or refuses the token (IdempotentInstanceTerminated). So each request has a ``Generation``: a
retry keeps it, and a new attempt whose predecessor is gone begins the next one, recorded in the
ledger before it is sent (a crash after the send still finds what it made, by tags).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from dataclasses import dataclass

from tasks.errors import ConfigError

TAG_DEPLOYMENT = "pdlift:deployment"
TAG_RUN = "pdlift:run"
TAG_STAGE = "pdlift:stage"
TAG_CREATED = "pdlift:created-at"
TAG_TTL = "pdlift:ttl"
TAG_ROLE = "pdlift:role"


@dataclass(frozen=True)
class RunIdentity:
    deployment: str
    run_id: str
    created_at: dt.datetime  # fixed when the run starts and recorded in the ledger
    ttl_hours: int

    @property
    def prefix(self) -> str:
        """Base name for named resources (placement group, launch template)."""
        return f"pdlift-{self.deployment}-{self.run_id}"[:120]


@dataclass(frozen=True)
class Generation:
    """Which attempt of one logical request (a reservation, a gang launch) this is. 0 is the run's
    first, with tokens as they always were; a later one changes the token and the request's own
    clock (a reservation's EndDate is counted from ``started_at``, not from the run's start)."""

    number: int = 0
    started_at: dt.datetime | None = None  # when this generation began; None: the run's start

    def next(self, at: dt.datetime) -> "Generation":
        return Generation(self.number + 1, at)


# A run id is the value of the ``pdlift.io/run`` node label (kubelet's --node-labels in the user
# data) and of EC2 tags, and part of state-store keys: a Kubernetes label value (at most 63
# characters, alphanumerics with '-', '_' or '.' between). One that is not would be refused only
# when the bought nodes fail to register.
RUN_ID = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")


def check_run_id(run_id: str) -> str:
    """``run_id`` when it can label a node; else ConfigError naming the field and the fix."""
    if not RUN_ID.fullmatch(run_id):
        raise ConfigError(f"run_id {run_id!r} cannot be used: it labels the run's nodes (pdlift.io/run) and tags "
                          "its resources, so it must be 1-63 letters, digits, '-', '_' or '.', starting and ending "
                          "with a letter or digit (e.g. 'migrate-2026-12-04'); leave it empty to derive one from "
                          "the blueprint")
    return run_id


def default_run_id(blueprint_json: str) -> str:
    """A run id derived from the blueprint, so re-running the same blueprint adopts its resources."""
    return "r" + hashlib.sha256(blueprint_json.encode()).hexdigest()[:10]


def client_token(run: RunIdentity, stage: str, zone: str, count: int, extra: str = "", generation: int = 0) -> str:
    """EC2 ClientToken (<= 64 ASCII chars) for one logical request of one run, in one generation."""
    parts: list = [run.deployment, run.run_id, stage, zone, count, extra]
    material = json.dumps(parts + [generation] if generation else parts)  # generation 0: as before
    return "pdlift-" + hashlib.sha256(material.encode()).hexdigest()[:48]


def tags(run: RunIdentity, stage: str, name: str | None = None, **extra: str) -> list[dict[str, str]]:
    out = {
        TAG_DEPLOYMENT: run.deployment,
        TAG_RUN: run.run_id,
        TAG_STAGE: stage,
        TAG_CREATED: run.created_at.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        TAG_TTL: str(run.ttl_hours),
    }
    if name:
        out["Name"] = name
    out.update(extra)
    return [{"Key": k, "Value": v} for k, v in out.items()]


def tag_specifications(resource_type: str, run: RunIdentity, stage: str,
                       name: str | None = None, **extra: str) -> list[dict]:
    return [{"ResourceType": resource_type, "Tags": tags(run, stage, name, **extra)}]


def run_filters(deployment: str, run_id: str | None = None) -> list[dict]:
    """EC2 Filters that select this deployment's (and optionally this run's) resources."""
    out = [{"Name": f"tag:{TAG_DEPLOYMENT}", "Values": [deployment]}]
    if run_id:
        out.append({"Name": f"tag:{TAG_RUN}", "Values": [run_id]})
    return out


def tag_dict(tag_list: list[dict] | None) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in (tag_list or [])}


def artifact_key(*parts: str) -> str:
    """A Prefect artifact key (lowercase letters, digits and dashes) from name parts."""
    return re.sub(r"[^a-z0-9-]+", "-", "-".join(parts).lower()).strip("-")[:100]
