"""core/v1 Events as the scheduler and kubelet record them (deduplicated, with counts)."""

from __future__ import annotations

import time
import uuid

from sandbox.kube import errors, resources
from sandbox.kube.api import Api, now_iso

EVENTS = resources.lookup("", "v1", "events")


class EventRecorder:
    def __init__(self, api: Api):
        self.api = api
        self._seen: dict[tuple, tuple[str, str, float]] = {}  # key -> (ns, name, last write)

    def record(self, involved: dict, etype: str, reason: str, message: str,
               component: str = "kubelet", min_interval: float = 5.0) -> None:
        """Record an event about ``involved``; repeats within ``min_interval`` only count once,
        so a retry loop cannot flood the event list."""
        meta = involved["metadata"]
        ns = meta.get("namespace") or "default"
        key = (meta.get("uid"), reason, message)
        now = time.monotonic()
        seen = self._seen.get(key)
        if seen is not None:
            ev_ns, ev_name, last = seen
            if now - last < min_interval:
                return
            current = self.api.store.get(EVENTS, ev_ns, ev_name)
            if current is not None:
                current["count"] = current.get("count", 1) + 1
                current["lastTimestamp"] = now_iso()
                self.api.store.update(EVENTS, current)
                self._seen[key] = (ev_ns, ev_name, now)
                return
        name = f"{meta['name']}.{uuid.uuid4().hex[:16]}"
        ts = now_iso()
        body = {
            "metadata": {"name": name, "namespace": ns},
            "involvedObject": {"kind": involved.get("kind"), "namespace": meta.get("namespace", ""),
                               "name": meta["name"], "uid": meta.get("uid"),
                               "apiVersion": involved.get("apiVersion"),
                               "resourceVersion": meta.get("resourceVersion", "")},
            "reason": reason, "message": message, "type": etype,
            "source": {"component": component}, "firstTimestamp": ts, "lastTimestamp": ts,
            "count": 1, "reportingComponent": component, "reportingInstance": "",
        }
        try:
            self.api.create(EVENTS, ns, body, component)
        except errors.ApiError:
            return  # namespace going away: the event has nowhere to live
        self._seen[key] = (ns, name, now)

    def forget(self, uid: str) -> None:
        for key in [k for k in self._seen if k[0] == uid]:
            del self._seen[key]
