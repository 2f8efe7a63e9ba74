"""Who may drive a run now: the lease a run holds in the state store while it works. Pure.

A lease names its holder (the flow run and the worker process) and an expiry the holder keeps
pushing forward while it works (``tasks.adapters.run_lease``). Another run of the same run id is
refused while the lease is live; it takes the lease over once the holder is gone: the expiry
passed (its worker died), or Prefect says the holder's flow run has ended (crashed, failed,
cancelled: no need to wait out the expiry). The holder may take it again at any time: its own
process (a stage flow that ``migrate`` runs as a subflow, or the next flow of the same process),
and its own flow run in another process (a suspended run resumed, a retried run, on any worker).
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import asdict, dataclass

from tasks.planning.ledger import now_str, parse_time

DEFAULT_TTL_S = 180.0  # renewed every third of it: a worker that dies frees its runs within 3 minutes


@dataclass(frozen=True)
class Holder:
    flow_run_id: str  # the flow run that took the lease ("" outside a flow run)
    worker: str       # host:pid of the process that drives the run


@dataclass(frozen=True)
class Lease:
    deployment: str
    run_id: str
    flow_run_id: str
    worker: str
    expires_at: str
    taken_at: str

    def expired(self, now: dt.datetime) -> bool:
        return parse_time(self.expires_at) <= now

    def describe(self) -> str:
        return (f"run {self.run_id} is held by flow run {self.flow_run_id or '(none)'} on worker {self.worker} "
                f"until {self.expires_at}")


def is_mine(current: Lease, me: Holder) -> bool:
    return current.worker == me.worker or bool(me.flow_run_id) and current.flow_run_id == me.flow_run_id


def may_take(current: Lease | None, me: Holder, now: dt.datetime, holder_ended: bool) -> bool:
    """Whether ``me`` may hold the run now (see the module docstring)."""
    return current is None or is_mine(current, me) or current.expired(now) or holder_ended


def taken(current: Lease | None, deployment: str, run_id: str, me: Holder, now: dt.datetime,
          ttl_s: float) -> Lease:
    """The lease ``me`` writes: a fresh one, or the holder's own one pushed forward (a subflow keeps
    the flow run that took it as the holder)."""
    until = now_str(now + dt.timedelta(seconds=ttl_s))
    # Only a live lease of this process keeps its flow run (a subflow under migrate); a released
    # or expired one is the next flow run's, or the holder's own flow run's, resumed elsewhere.
    if current is not None and is_mine(current, me) and (not current.expired(now)
                                                         or current.flow_run_id == me.flow_run_id):
        return Lease(deployment, run_id, current.flow_run_id, me.worker, until, current.taken_at)
    return Lease(deployment, run_id, me.flow_run_id, me.worker, until, now_str(now))


def dumps(lease: Lease) -> bytes:
    return json.dumps({"kind": "pdlift-run-lease", **asdict(lease)}, indent=2, sort_keys=True).encode()


def loads(data: bytes) -> Lease:
    """A stored lease; fields a newer pdlift added are ignored (ValueError: not a lease)."""
    raw = json.loads(data)
    if not isinstance(raw, dict) or raw.get("kind") != "pdlift-run-lease":
        raise ValueError("not a pdlift run lease")
    return Lease(**{name: str(raw[name]) for name in Lease.__dataclass_fields__})
