"""Faults tests inject through ``POST /__sandbox/faults`` on the Kubernetes stand-in.

    {"fault": "node-not-ready", "node": NAME}           node Ready=Unknown, unreachable taints
    {"fault": "slow-start", "seconds": N,                containers stay ContainerCreating N s
     "pod_prefix": "...", "namespace": "..."}           (optional filters)
    {"fault": "crash", "pod_prefix": "...",             kill matching running containers once
     "container": "...", "persistent": false}          (persistent: every start exits 1)
    {"fault": "image-pull", "image_prefix": "..."}      pulls of matching images fail

``DELETE /__sandbox/faults`` clears all (or ``?fault=TYPE`` / ``?id=N``, or one node's
not-ready with ``{"fault": "node-not-ready", "node": NAME}`` in the body).
"""

from __future__ import annotations

import threading

from sandbox.kube.errors import bad_request

KINDS = {"node-not-ready": ("node",), "slow-start": ("seconds",), "crash": ("pod_prefix",),
         "image-pull": ("image_prefix",)}


def _matches(f: dict, pod: dict, container: str | None = None) -> bool:
    meta = pod["metadata"]
    if f.get("namespace") and meta.get("namespace") != f["namespace"]:
        return False
    if not meta["name"].startswith(f.get("pod_prefix") or ""):
        return False
    return not (f.get("container") and container and f["container"] != container)


class Faults:
    def __init__(self):
        self._lock = threading.Lock()
        self._items: list[dict] = []
        self._next_id = 1
        self._fired: set[tuple] = set()  # (fault id, pod uid, container) for one-shot crashes

    def add(self, spec: dict) -> dict:
        kind = spec.get("fault")
        if kind not in KINDS:
            raise bad_request(f"unknown fault {kind!r}; known: {sorted(KINDS)}")
        missing = [k for k in KINDS[kind] if k not in spec]
        if missing:
            raise bad_request(f"fault {kind!r} needs {missing}")
        with self._lock:
            item = dict(spec, id=self._next_id)
            self._next_id += 1
            self._items.append(item)
            return item

    def list(self) -> list[dict]:
        with self._lock:
            return [dict(f) for f in self._items]

    def clear(self, kind: str | None = None, fid: int | None = None, node: str | None = None) -> int:
        with self._lock:
            before = len(self._items)
            self._items = [f for f in self._items
                           if not ((kind is None or f["fault"] == kind)
                                   and (fid is None or f["id"] == fid)
                                   and (node is None or f.get("node") == node))]
            return before - len(self._items)

    def _of(self, kind: str) -> list[dict]:
        with self._lock:
            return [f for f in self._items if f["fault"] == kind]

    def node_not_ready(self, node: str) -> bool:
        return any(f["node"] == node for f in self._of("node-not-ready"))

    def slow_start_seconds(self, pod: dict) -> float:
        return max([float(f["seconds"]) for f in self._of("slow-start") if _matches(f, pod)],
                   default=0.0)

    def fail_at_start(self, pod: dict, container: str) -> bool:
        return any(f.get("persistent") and _matches(f, pod, container) for f in self._of("crash"))

    def kill_now(self, pod: dict, container: str) -> bool:
        """True once per (fault, container) for one-shot crash faults."""
        for f in self._of("crash"):
            if f.get("persistent") or not _matches(f, pod, container):
                continue
            key = (f["id"], pod["metadata"]["uid"], container)
            with self._lock:
                if key not in self._fired:
                    self._fired.add(key)
                    return True
        return False

    def image_pull_fails(self, image: str) -> bool:
        return any(image.startswith(f["image_prefix"]) for f in self._of("image-pull"))
