"""Pod status as the kubelet reports it, and the container logs behind ``pods/<name>/log``."""

from __future__ import annotations

import hashlib
from pathlib import Path

from sandbox.kube import errors
from sandbox.kube.api import now_iso


def _condition(prev: dict, ctype: str, ok: bool, reason: str | None = None,
               message: str | None = None) -> dict:
    status = "True" if ok else "False"
    old = prev.get(ctype)
    since = old["lastTransitionTime"] if old and old.get("status") == status else now_iso()
    c = {"type": ctype, "status": status, "lastProbeTime": None, "lastTransitionTime": since}
    if not ok and reason:
        c["reason"], c["message"] = reason, message
    return c


def _image_id(image: str) -> str:
    if "@sha256:" in image:
        return image
    repo = image.rsplit(":", 1)[0] if ":" in image.rsplit("/", 1)[-1] else image
    return f"{repo}@sha256:{hashlib.sha256(image.encode()).hexdigest()}"


def _container_status(c) -> dict:
    image = c.spec.get("image", "")
    out = {"name": c.name, "image": image, "imageID": _image_id(image) if c.attempts else "",
           "ready": c.ready, "started": c.proc is not None and c.startup_ok,
           "restartCount": c.restarts, "state": c.state, "lastState": c.last_state}
    if c.container_id:
        out["containerID"] = c.container_id
    return out


def _qos(pod: dict) -> str:
    res = [c.get("resources") or {} for c in pod["spec"].get("containers") or []]
    if not any(r.get("requests") or r.get("limits") for r in res):
        return "BestEffort"
    guaranteed = all(r.get("limits", {}).get(k) and r.get("requests", {}).get(k) == r["limits"][k]
                     for r in res for k in ("cpu", "memory"))
    return "Guaranteed" if guaranteed else "Burstable"


def compose_status(pod: dict, prt, address: str) -> dict:
    prev_status = pod.get("status") or {}
    prev = {c["type"]: c for c in prev_status.get("conditions") or []}
    inits = [c for c in prt.ctrs if c.init]
    main = [c for c in prt.ctrs if not c.init]
    init_done = all(c.succeeded or (c.sidecar and c.proc is not None) for c in inits)
    if not init_done:
        for c in main:
            if not c.attempts:
                c.state = {"waiting": {"reason": "PodInitializing"}}
    unready = [c.name for c in main if not c.ready]
    ready = init_done and not unready
    if main and all(c.done for c in main):
        failed = any(c.state.get("terminated", {}).get("exitCode") for c in main)
        phase = "Failed" if failed else "Succeeded"
    elif init_done and main and all(c.attempts for c in main):
        phase = "Running"
    else:
        phase = "Pending"
    not_ready_msg = f"containers with unready status: [{' '.join(unready)}]"
    conditions = [
        _condition(prev, "PodReadyToStartContainers", True),
        _condition(prev, "Initialized", init_done, "ContainersNotInitialized",
                   "containers with incomplete status: ["
                   + " ".join(c.name for c in inits if not c.succeeded) + "]"),
        _condition(prev, "Ready", ready, "ContainersNotReady", not_ready_msg),
        _condition(prev, "ContainersReady", ready, "ContainersNotReady", not_ready_msg),
    ]
    if "PodScheduled" in prev:
        conditions.append(prev["PodScheduled"])
    status = {"phase": phase, "conditions": conditions, "hostIP": address,
              "hostIPs": [{"ip": address}], "podIP": address, "podIPs": [{"ip": address}],
              "startTime": prt.start_time, "qosClass": _qos(pod),
              "containerStatuses": [_container_status(c) for c in main]}
    if inits:
        status["initContainerStatuses"] = [_container_status(c) for c in inits]
    return status


def lost_node_status(pod: dict) -> dict:
    """What the node lifecycle controller writes for pods on a node that stopped reporting."""
    status = dict(pod.get("status") or {})
    prev = {c["type"]: c for c in status.get("conditions") or []}
    out = []
    for c in status.get("conditions") or []:
        if c["type"] in ("Ready", "ContainersReady"):
            c = _condition(prev, c["type"], False, "NodeNotReady" if c["type"] == "Ready" else
                           "ContainersNotReady", "Node is not ready")
        out.append(c)
    status["conditions"] = out
    status["containerStatuses"] = [dict(cs, ready=False)
                                   for cs in status.get("containerStatuses") or []]
    return status


def read_tail(path: Path, lines: int | None = None, limit: int | None = None) -> bytes:
    try:
        data = path.read_bytes()
    except OSError:
        return b""
    if lines is not None:
        parts = data.splitlines(keepends=True)
        data = b"".join(parts[-lines:]) if lines > 0 else b""
    if limit is not None:
        data = data[:limit]
    return data


def log_container(pod: dict, container: str | None) -> str:
    """The container a log request names (or the pod's only one); 400 when there is none such."""
    meta = pod["metadata"]
    names = [c["name"] for c in pod["spec"].get("containers") or []]
    all_names = names + [c["name"] for c in pod["spec"].get("initContainers") or []]
    if container is None:
        if len(names) != 1:
            raise errors.bad_request(f"a container name must be specified for pod {meta['name']}, "
                                     f"choose one of: [{' '.join(names)}]")
        container = names[0]
    if container not in all_names:
        raise errors.bad_request(f"container {container} is not valid for pod {meta['name']}")
    return container


def log_file(kubelet, pod: dict, container: str | None, previous: bool) -> Path:
    meta = pod["metadata"]
    container = log_container(pod, container)
    prt = kubelet.pods.get(meta["uid"])
    c = next((c for c in prt.ctrs if c.name == container), None) if prt else None
    if c is None or c.attempts == 0:
        reason = (c.state.get("waiting", {}).get("reason") if c else None) or "ContainerCreating"
        if reason in ("ErrImagePull", "ImagePullBackOff"):
            reason = "trying and failing to pull image"
        raise errors.bad_request(f'container "{container}" in pod "{meta["name"]}" is waiting '
                                 f"to start: {reason}")
    index = c.attempts - 1 - (1 if previous else 0)
    if index < 0:
        raise errors.bad_request(f'previous terminated container "{container}" in pod '
                                 f'"{meta["name"]}" not found')
    return c.log_path(index)
