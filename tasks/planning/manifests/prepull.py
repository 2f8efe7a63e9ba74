"""Pods that pull a ``recreate`` candidate's images onto the nodes it will run on, before
production goes down. Pure.

A recreate's downtime starts when production is drained; an engine image that cannot be pulled
(a wrong digest, a registry the nodes cannot reach) would otherwise only show once the live
engines are deleted, and a multi-gigabyte pull would sit inside the downtime. So, with the live
colour still serving, one pod per node runs ``true`` in every candidate image:

* ``nodeName`` set: the kubelet admits it directly (the scheduler would find no GPUs free), and
  it requests no resources (BestEffort), so a node full of engine pods still admits it;
* it tolerates every taint (the GPU and EFA nodes' ``NoSchedule``, and ``NoExecute``);
* ``restartPolicy: Never``: a container that ran means its image was pulled and unpacked, even
  if an image lacks ``true`` (its container then fails to start, the image is there all the same).

Sources: Kubernetes "Assigning Pods to Nodes" (nodeName bypasses the scheduler; kubelet
admission), "Pod Quality of Service Classes" (BestEffort), "Images" (IfNotPresent; the
``ErrImagePull``/``ImagePullBackOff`` waiting reasons); ``../shared/reference/fleet-updates.md``
(A. recreate: pre-pull images on all nodes).
"""

from __future__ import annotations

import hashlib

from blueprints.schema import Blueprint
from tasks.planning.manifests import common

PREPULL = "prepull"
# Waiting reasons that mean the image will not come (the kubelet keeps retrying in back-off).
PULL_FAILURES = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
                 "RegistryUnavailable")


def selector(bp: Blueprint) -> dict[str, str]:
    return {common.DEPLOYMENT_LABEL: bp.name, "app.kubernetes.io/component": PREPULL}


def images(objects: list[dict]) -> list[str]:
    """Every container image of the rendered engine stack (LeaderWorkerSets), in order, once."""
    found: list[str] = []
    for obj in objects:
        if obj.get("kind") != "LeaderWorkerSet":
            continue
        lwt = obj["spec"]["leaderWorkerTemplate"]
        for template in (lwt.get("leaderTemplate"), lwt.get("workerTemplate")):
            spec = (template or {}).get("spec") or {}
            for c in [*spec.get("initContainers", []), *spec.get("containers", [])]:
                if c.get("image") and c["image"] not in found:
                    found.append(c["image"])
    return found


def pod_name(node: str, wanted: list[str]) -> str:
    """Named by node and images: a re-run finds its own pod, a different image set gets a new one."""
    digest = hashlib.sha256("\n".join([node, *wanted]).encode()).hexdigest()[:10]
    return f"{PREPULL}-{digest}"


def pods(bp: Blueprint, nodes: list[str], wanted: list[str]) -> list[dict]:
    """One pod per node, one container per image, in the stable namespace."""
    if not wanted:
        raise ValueError("no images to pull")
    return [{
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod_name(node, wanted), "namespace": common.stable_namespace(bp),
                     "labels": {**selector(bp), "app.kubernetes.io/part-of": bp.name,
                                "app.kubernetes.io/managed-by": "pdlift"}},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "tolerations": [{"operator": "Exists"}],
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": f"image-{i}", "image": image, "imagePullPolicy": "IfNotPresent",
                            "command": ["true"]} for i, image in enumerate(wanted)],
        },
    } for node in sorted(set(nodes))]
