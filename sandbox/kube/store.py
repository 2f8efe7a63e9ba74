"""In-memory object store with one resourceVersion counter and a bounded watch log.

Every write bumps the global resourceVersion and appends an event that watchers read. A
write that changes nothing is not a write: the stored object (and its resourceVersion) stays
as it was, which is what makes a repeated server-side apply a no-op.
"""

from __future__ import annotations

import copy
import threading
from collections import deque
from typing import NamedTuple

from sandbox.kube.errors import expired


class WatchEvent(NamedTuple):
    rv: int
    type: str  # ADDED | MODIFIED | DELETED
    rkey: str  # ResourceType.key
    obj: dict
    old: dict | None


_ATOMS = (str, int, float, bool, type(None))


def clone(obj):
    """A copy no caller can change the stored object through. Objects here are JSON trees (what
    the API decoded); walking dicts and lists directly is about 3x faster than copy.deepcopy,
    which spent two thirds of this process's CPU in the control loop's lists (py-spy, a session
    with two colours' pods: 17% of a core while idle). Anything else is deep-copied."""
    kind = type(obj)
    if kind is dict:
        return {k: clone(v) for k, v in obj.items()}
    if kind is list:
        return [clone(v) for v in obj]
    if kind in _ATOMS:
        return obj
    return copy.deepcopy(obj)


def _without_rv(obj: dict) -> dict:
    meta = dict(obj.get("metadata") or {})
    meta.pop("resourceVersion", None)
    return {**obj, "metadata": meta}


class Store:
    def __init__(self, log_size: int = 20000):
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self._rv = 0
        self._objects: dict[str, dict[tuple[str, str], dict]] = {}
        self._log: deque[WatchEvent] = deque()
        self._log_size = log_size
        self._log_floor = 0  # events with rv <= floor were dropped from the log
        self.closed = False

    @property
    def resource_version(self) -> int:
        with self.lock:
            return self._rv

    def get(self, rt, ns: str, name: str) -> dict | None:
        with self.lock:
            obj = self._objects.get(rt.key, {}).get((ns or "", name))
            return clone(obj) if obj is not None else None

    def list(self, rt, ns: str | None = None) -> list[dict]:
        with self.lock:
            items = self._objects.get(rt.key, {})
            keys = sorted(k for k in items if ns is None or k[0] == ns)
            return [clone(items[k]) for k in keys]

    def view(self, rt, ns: str | None = None) -> list[dict]:
        """``list`` without the copies, for the control loop (runtime.py), whose passes read and
        write only through the API (create, mutate, write_status: each changes a fresh copy).
        Copying every pod three times a tick (five ticks a second) and every object of every kind
        once a second was most of this process's CPU: py-spy, 40 of 63 samples in ``clone``; 7.5%
        of a core with 24 pods and 6 services, 0.8% with views. Safe because a stored object is
        never changed in place (create and update store a copy, delete drops it): a view stays
        what it was. The caller must not change what it gets."""
        with self.lock:
            items = self._objects.get(rt.key, {})
            return [items[k] for k in sorted(k for k in items if ns is None or k[0] == ns)]

    def _log_event(self, etype: str, rt, obj: dict, old: dict | None) -> None:
        self._log.append(WatchEvent(self._rv, etype, rt.key, clone(obj), old))
        while len(self._log) > self._log_size:
            self._log_floor = self._log.popleft().rv
        self.changed.notify_all()

    def create(self, rt, obj: dict) -> dict:
        """Store a new object (the caller checked it does not exist)."""
        with self.lock:
            self._rv += 1
            obj = clone(obj)
            obj["metadata"]["resourceVersion"] = str(self._rv)
            meta = obj["metadata"]
            self._objects.setdefault(rt.key, {})[(meta.get("namespace") or "", meta["name"])] = obj
            self._log_event("ADDED", rt, obj, None)
            return clone(obj)

    def update(self, rt, obj: dict) -> dict:
        """Replace an existing object; unchanged content keeps the old resourceVersion."""
        with self.lock:
            meta = obj["metadata"]
            key = (meta.get("namespace") or "", meta["name"])
            bucket = self._objects.setdefault(rt.key, {})
            old = bucket.get(key)
            if old is not None and _without_rv(old) == _without_rv(obj):
                return clone(old)
            self._rv += 1
            obj = clone(obj)
            obj["metadata"]["resourceVersion"] = str(self._rv)
            bucket[key] = obj
            self._log_event("MODIFIED" if old is not None else "ADDED", rt, obj, old)
            return clone(obj)

    def delete(self, rt, ns: str, name: str) -> dict | None:
        with self.lock:
            gone = self._objects.get(rt.key, {}).pop((ns or "", name), None)
            if gone is None:
                return None
            self._rv += 1
            # a copy at the deletion's version: a stored object is never changed in place (view)
            obj = {**gone, "metadata": {**gone["metadata"], "resourceVersion": str(self._rv)}}
            self._log_event("DELETED", rt, obj, obj)
            return clone(obj)

    def events_after(self, rv: int) -> list[WatchEvent]:
        with self.lock:
            if rv < self._log_floor:
                raise expired(f"too old resource version: {rv} ({self._log_floor + 1})")
            return [e for e in self._log if e.rv > rv]

    def wait_for_change(self, after_rv: int, timeout: float) -> None:
        with self.lock:
            if self._rv <= after_rv and not self.closed:
                self.changed.wait(timeout)

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.changed.notify_all()
