"""Run leases in the state store (``tasks.planning.lease`` decides; this reads, writes, renews).

Taking and renewing are conditional writes on ``leases/<deployment>/<run id>.json``: of two
workers that read the same expired lease, one writes and the other gets ``StateConflict``,
re-reads, and is refused. A daemon thread renews a held lease every third of its time to live
while this process lives; when the process dies the renewals stop and the lease runs out.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import threading
from collections.abc import Callable

from tasks.adapters.state_store import CREATE, StateConflict, StateStore
from tasks.errors import ConfigError, RunHeld, StageFailed
from tasks.planning import lease as plan
from tasks.planning.lease import Holder, Lease

ATTEMPTS = 10


_LOCKS: dict[tuple[str, str], threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


def _lock(deployment: str, run_id: str) -> threading.Lock:
    """One lock per run in this process: its renewal and its release never interleave."""
    with _LOCKS_GUARD:
        return _LOCKS.setdefault((deployment, run_id), threading.Lock())


def this_worker() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


class RunLeases:
    def __init__(self, store: StateStore, ttl_s: float = plan.DEFAULT_TTL_S,
                 now: Callable[[], dt.datetime] = _now, log: Callable[[str], None] = lambda _: None):
        self.store, self.ttl_s, self._now, self._log = store, ttl_s, now, log

    @staticmethod
    def key(deployment: str, run_id: str) -> str:
        return f"leases/{deployment}/{run_id}.json"

    def current(self, deployment: str, run_id: str) -> tuple[Lease | None, str]:
        got = self.store.get(self.key(deployment, run_id))
        if got is None:
            return None, CREATE
        try:
            return plan.loads(got.data), got.etag
        except (ValueError, TypeError, KeyError) as e:  # never overwritten: it may be a newer pdlift's
            raise ConfigError(f"cannot read the run lease {self.store.uri}/{self.key(deployment, run_id)}: {e}; "
                              f"if no flow run of {run_id} is running, delete it") from e

    def take(self, deployment: str, run_id: str, me: Holder,
             holder_ended: Callable[[str], bool] = lambda _flow_run_id: False) -> Lease:
        """Hold the run, or raise RunHeld naming who holds it and until when (nothing else touched).
        ``holder_ended(flow_run_id)``: whether that flow run has ended (asked of Prefect)."""
        for _ in range(ATTEMPTS):
            current, etag = self.current(deployment, run_id)
            now = self._now()
            live_other = current is not None and not plan.is_mine(current, me) and not current.expired(now)
            if not plan.may_take(current, me, now, live_other and holder_ended(current.flow_run_id)):
                raise RunHeld(current.describe() + "; wait for it, or stop that flow run "  # type: ignore[union-attr]
                              "(a lease whose worker died runs out by itself)")
            lease = plan.taken(current, deployment, run_id, me, now, self.ttl_s)
            try:
                self.store.put(self.key(deployment, run_id), plan.dumps(lease), if_match=etag)
            except StateConflict:
                continue  # someone wrote between our read and write: decide again on what they wrote
            if current is not None and not plan.is_mine(current, me):
                self._log(f"took over the lease of run {run_id} from flow run {current.flow_run_id} on "
                          f"{current.worker} (" + ("expired" if current.expired(now) else "its flow run ended") + ")")
            return lease
        raise StageFailed(f"could not take the lease of run {run_id}: it changed under {ATTEMPTS} attempts in a row")

    def renew(self, lease: Lease) -> Lease | None:
        """Push the expiry forward; None when the lease is no longer this process's (taken over).
        A lost race with this process's own writes (a subflow taking it again) is read again."""
        with _lock(lease.deployment, lease.run_id):
            for _ in range(ATTEMPTS):
                current, etag = self.current(lease.deployment, lease.run_id)
                if current is None or current.worker != lease.worker:
                    return None
                renewed = plan.taken(current, lease.deployment, lease.run_id,
                                     Holder(current.flow_run_id, lease.worker), self._now(), self.ttl_s)
                try:
                    self.store.put(self.key(lease.deployment, lease.run_id), plan.dumps(renewed), if_match=etag)
                except StateConflict:
                    continue
                return renewed
        return lease  # contended all along but still ours: try again next period

    def release(self, lease: Lease, flow_run_id: str) -> bool:
        """Give the run up when ``flow_run_id`` took it (a subflow's end keeps its parent's lease)."""
        with _lock(lease.deployment, lease.run_id):
            for _ in range(ATTEMPTS):
                current, etag = self.current(lease.deployment, lease.run_id)
                if current is None or current.worker != lease.worker or current.flow_run_id != flow_run_id:
                    return False
                # An expiry in the past: anyone may take it, and the document says who held it last.
                ended = plan.taken(current, lease.deployment, lease.run_id, Holder(flow_run_id, lease.worker),
                                   self._now(), -1.0)
                try:
                    self.store.put(self.key(lease.deployment, lease.run_id), plan.dumps(ended), if_match=etag)
                except StateConflict:
                    continue
                return True
        return False

    def keep_renewed(self, lease: Lease) -> threading.Event:
        """Renew ``lease`` in the background until the returned event is set or the lease is lost."""
        stop = threading.Event()

        def loop() -> None:
            held: Lease | None = lease
            while held is not None and not stop.wait(self.ttl_s / 3):
                try:
                    held = self.renew(held)
                except Exception as e:  # a store outage: try again next time, the expiry has slack
                    self._log(f"could not renew the lease of run {lease.run_id}: {type(e).__name__}: {e}")
            if held is None and not stop.is_set():
                self._log(f"the lease of run {lease.run_id} was taken over; this process stops renewing it")

        threading.Thread(target=loop, name=f"lease-{lease.run_id}", daemon=True).start()
        return stop


# The leases this process holds, each with its renewal: a subflow of the holder takes the same
# lease again and must not start a second renewal; letting go stops the renewal first, so it
# cannot push a released lease's expiry forward again.
_HELD: dict[tuple[str, str], threading.Event] = {}  # the renewal's stop event
_HELD_LOCK = threading.Lock()


def hold(leases: RunLeases, deployment: str, run_id: str, me: Holder,
         holder_ended: Callable[[str], bool] = lambda _flow_run_id: False) -> Lease:
    """Take the run's lease (RunHeld if another process holds it) and keep it renewed."""
    lease = leases.take(deployment, run_id, me, holder_ended)
    with _HELD_LOCK:
        running = _HELD.get((deployment, run_id))
        if running is None or running.is_set():
            _HELD[(deployment, run_id)] = leases.keep_renewed(lease)
    return lease


def check(leases: RunLeases, deployment: str, run_id: str) -> None:
    """Raise RunHeld when another process holds the run now: this one's ledger writes must stop
    (the fence before every ledger update; one read of the lease)."""
    current, _ = leases.current(deployment, run_id)
    if current is not None and current.worker != this_worker() and not current.expired(leases._now()):
        raise RunHeld(f"run {run_id} was taken over while this flow run worked ({current.describe()}); this one "
                      f"stops here: `pdlift state show BLUEPRINT --run {run_id}` shows who holds it")


def let_go(leases: RunLeases, deployment: str, run_id: str, flow_run_id: str) -> bool:
    """Release the run's lease if ``flow_run_id`` took it; True when released."""
    current, _ = leases.current(deployment, run_id)
    if current is None or current.worker != this_worker() or current.flow_run_id != flow_run_id:
        return False
    with _HELD_LOCK:
        renewal = _HELD.pop((deployment, run_id), None)
    if renewal is not None:
        renewal.set()
    return leases.release(current, flow_run_id)
