"""Pieces every rendered object shares: names, labels, the EFA pod essentials. Pure.

Layout (why): each deployment colour gets its own namespace ``<bp.name>-blue|green`` holding the
prefill and decode LeaderWorkerSets, so deleting a candidate is deleting one namespace. The
production Service must switch colours with a selector, and a selector only sees pods of its
own namespace, so the production Service and both colours' routers live in one stable namespace
``<bp.name>`` (router ``router-<colour>``); the routers reach the engines through cluster DNS.
"""

from __future__ import annotations

import json
import re
from typing import Literal

from blueprints.rules import gpus_per_node
from blueprints.schema import Blueprint
from tasks.errors import ConfigError
from blueprints.catalog import instance_type
from tasks.planning.topology import LAYER_LABEL, ROLE_LABEL, bottom_layer

Colour = Literal["blue", "green"]
COLOURS = ("blue", "green")
DEPLOYMENT_LABEL, COLOUR_LABEL = "pdlift.io/deployment", "pdlift.io/colour"
RUN_LABEL = "pdlift.io/run"  # on every node pdlift launched: the run whose fleet it belongs to
KEPT_ANNOTATION = "pdlift.io/kept-until"  # on a replaced colour's namespace until it is retired
# One revision for both roles' engines (a hash of what they are told, colour left out), so a
# rolling update can tell which pods run the candidate; the model revision, which the engines
# are not told (they load a staged directory), rides along as an annotation.
REVISION_LABEL, MODEL_REVISION_ANNOTATION = "pdlift.io/revision", "pdlift.io/model-revision"
INSTANCE_TYPE_LABEL, HOSTNAME = "node.kubernetes.io/instance-type", "kubernetes.io/hostname"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
PREFILL, DECODE, ROUTER = "prefill", "decode", "router"
GPU, EFA, HUGEPAGES = "nvidia.com/gpu", "vpc.amazonaws.com/efa", "hugepages-2Mi"
ENGINE_CONTAINER = "engine"
ENGINE_SA, ROUTER_SA = "pdlift-engine", "pdlift-router"
MODELS_MOUNT = "/models"
DP_RPC_PORT, PP_MASTER_PORT, SGLANG_DIST_PORT = 5555, 29501, 5000
SHUTDOWN_TIMEOUT_S = 120  # vLLM --shutdown-timeout: drain in-flight requests on SIGTERM
# GLM-class loads take 10-45 min: the startup probe allows 45 min, then the group is recreated.
PROBE_PERIOD_S, STARTUP_BUDGET_S = 10, 45 * 60
_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")

# The EFA essentials (docs/sources.md#efa-pod-env). The KV-transfer part is in kv.py.
EFA_ENV = {
    "FI_PROVIDER": "efa",
    "FI_EFA_USE_DEVICE_RDMA": "1",
    "FI_EFA_ENABLE_SHM_TRANSFER": "0",
    "FI_EFA_FORK_SAFE": "1",  # the engines fork workers after libfabric is loaded
    "NCCL_SOCKET_IFNAME": "eth0",  # bootstrap sockets on the pod's ENA interface, data on EFA
    "GLOO_SOCKET_IFNAME": "eth0",
    "NCCL_DEBUG": "INFO",  # "NET/OFI ... Using network Libfabric": the log proof of EFA for PP/EP
    "NCCL_DEBUG_SUBSYS": "INIT,NET",
    # The host's libfabric and aws-ofi-nccl first: a wheel-bundled libfabric makes NCCL fall
    # back to TCP and hang cross-node collectives (docs/sources.md#single-libfabric). The rest is the image default.
    "LD_LIBRARY_PATH": "/opt/amazon/efa/lib:/opt/amazon/ofi-nccl/lib:/opt/amazon/openmpi/lib:"
                       "/usr/local/nvidia/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:/usr/local/lib",
    "HF_HUB_OFFLINE": "1",  # weights are staged on the node; never reach for the Hub
    "TRANSFORMERS_OFFLINE": "1",
}
# Host memory per engine pod on p5en/p5e/p5 (2 TiB RAM, 192 vCPU). /dev/shm counts against the
# memory limit; prefill gets more (PP activations and the KV staging of long prompts).
CPU_REQUEST, MEMORY, HUGEPAGES_SIZE = "160", "1536Gi", "5Gi"
SHM_SIZE = {PREFILL: "512Gi", DECODE: "256Gi"}


def colour_namespace(bp: Blueprint, colour: str) -> str:
    check_colour(colour)
    return f"{bp.name}-{colour}"


def stable_namespace(bp: Blueprint) -> str:
    return bp.name


def other_colour(colour: str | None) -> str:
    """The colour beside ``colour`` (a candidate's, or what a candidate replaces); blue when none is live."""
    return "green" if colour == "blue" else "blue"


def check_colour(colour: str) -> None:
    if colour not in COLOURS:
        raise ConfigError(f"deployment colour must be one of {COLOURS}, not {colour!r}")


def require_digest(image: str, field: str = "engine.image") -> str:
    """Tags move; a GPU fleet must run exactly the image that was validated."""
    if not _DIGEST.search(image):
        raise ConfigError(f"{field} {image!r} is not pinned by digest; use "
                          f"REGISTRY/REPO@sha256:<64 hex> (e.g. from `crane digest IMAGE:TAG`)")
    return image


def labels(bp: Blueprint, colour: str, role: str, name: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": name,
        "app.kubernetes.io/instance": f"{bp.name}-{colour}",
        "app.kubernetes.io/component": role,
        "app.kubernetes.io/part-of": bp.name,
        "app.kubernetes.io/version": bp.engine.version,
        "app.kubernetes.io/managed-by": "pdlift",
        DEPLOYMENT_LABEL: bp.name,
        COLOUR_LABEL: colour,
        ROLE_LABEL: role,
    }


def meta(name: str, namespace: str | None, labels_: dict[str, str],
         annotations: dict[str, str] | None = None) -> dict:
    out: dict = {"name": name}
    if namespace:
        out["namespace"] = namespace
    out["labels"] = dict(labels_)
    if annotations:
        out["annotations"] = dict(annotations)
    return out


def gpus(bp: Blueprint) -> int:
    n = gpus_per_node(bp)
    if n is None:
        raise ConfigError(f"unknown GPU count for {bp.aws.instance_type}; set topology.gpus_per_node")
    return n


def efa_devices(bp: Blueprint) -> int:
    known = instance_type(bp.aws.instance_type)
    return known.efa_devices if known else bp.fabric.efa_devices


def env_list(values: dict[str, str]) -> list[dict]:
    return [{"name": k, "value": v} for k, v in values.items()]


def field_env(name: str, path: str) -> dict:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


POD_ENV = [field_env("POD_IP", "status.podIP"), field_env("POD_NAME", "metadata.name"),
           field_env("POD_NAMESPACE", "metadata.namespace")]


def engine_resources(bp: Blueprint) -> dict:
    """Requests equal limits for the devices (whole node); no CPU limit (CFS throttling hurts
    the engines' busy loops), a memory limit so /dev/shm cannot take the node down."""
    devices = {GPU: str(gpus(bp)), EFA: str(efa_devices(bp)), HUGEPAGES: HUGEPAGES_SIZE}
    return {"requests": {"cpu": CPU_REQUEST, "memory": MEMORY, **devices},
            "limits": {"memory": MEMORY, **devices}}


def http_probe(path: str, port: int, failure_threshold: int, period: int = PROBE_PERIOD_S) -> dict:
    return {"httpGet": {"path": path, "port": port}, "periodSeconds": period,
            "timeoutSeconds": 5, "failureThreshold": failure_threshold}


def startup_probe(path: str, port: int) -> dict:
    return http_probe(path, port, STARTUP_BUDGET_S // PROBE_PERIOD_S)


def engine_volumes(role: str, weights_host_path: str) -> list[dict]:
    return [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": SHM_SIZE[role]}},
        # type Directory: a node without staged weights fails the pod at mount, loudly.
        {"name": "weights", "hostPath": {"path": weights_host_path, "type": "Directory"}},
    ]


def model_dir(bp: Blueprint) -> str:
    return f"{MODELS_MOUNT}/{bp.model.name}"


def engine_mounts(bp: Blueprint) -> list[dict]:
    return [{"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "weights", "mountPath": model_dir(bp), "readOnly": True}]


def tolerations() -> list[dict]:
    return [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"},
            {"key": EFA, "operator": "Exists", "effect": "NoSchedule"}]


def node_selector(bp: Blueprint, role: str) -> dict[str, str]:
    return {ROLE_LABEL: role, DEPLOYMENT_LABEL: bp.name, INSTANCE_TYPE_LABEL: bp.aws.instance_type}


def pin_to_fleet(objects: list[dict], run_id: str) -> list[dict]:
    """``objects`` with every engine pod template selecting the nodes of ``run_id``'s fleet only,
    and the routers that fleet's nodes or nodes pdlift did not launch (CPU nodes, which carry no
    ``pdlift.io/role``). A ``fleet`` update brings its candidate up on a second fleet while the
    first still holds nodes of the same deployment and roles; without the pin a pod could land on
    the first fleet and die with it when that fleet is released. The pin is no engine input: the
    stack revision is unchanged. Returns new objects; ``objects`` is not modified."""
    out = json.loads(json.dumps(objects))
    for obj in out:
        if obj.get("kind") == "LeaderWorkerSet":
            lwt = obj["spec"]["leaderWorkerTemplate"]
            for key in ("leaderTemplate", "workerTemplate"):
                if key in lwt:
                    lwt[key]["spec"].setdefault("nodeSelector", {})[RUN_LABEL] = run_id
        elif obj.get("kind") == "Deployment":
            terms = [{"matchExpressions": [{"key": RUN_LABEL, "operator": "In", "values": [run_id]}]},
                     {"matchExpressions": [{"key": ROLE_LABEL, "operator": "DoesNotExist"}]}]  # ORed
            obj["spec"]["template"]["spec"].setdefault("affinity", {})["nodeAffinity"] = {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
    return out


def _term(match: dict[str, str], key: str) -> dict:
    return {"labelSelector": {"matchLabels": dict(match)}, "topologyKey": key}


def affinity(bp: Blueprint, role: str) -> dict:
    """Prefill and decode never share a host: same-node EFA transfers fail with EAGAIN
    (docs/sources.md#pd-anti-affinity). The prefill group must share a bottom network node (pipeline
    traffic every micro-batch; the launch stage picked such nodes, so a miss is a placement
    bug worth failing at scheduling). Decode only prefers that closeness: its EP all-to-all
    and the KV pulls gain from it, but a decode one layer further away still works. The bottom
    layer is the instance type's (3 on p5en, 4 on p6-b200): on p6, layer 3 is one level too far up."""
    other = DECODE if role == PREFILL else PREFILL
    bottom = LAYER_LABEL.format(bottom_layer(bp.aws.instance_type))
    out: dict = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        _term({DEPLOYMENT_LABEL: bp.name, ROLE_LABEL: other}, HOSTNAME)]}}
    if role == PREFILL:
        out["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [
            _term({LWS_NAME_LABEL: PREFILL}, bottom)]}
    else:
        out["podAffinity"] = {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": _term({LWS_NAME_LABEL: DECODE}, bottom)},
            {"weight": 50, "podAffinityTerm": _term({LWS_NAME_LABEL: PREFILL}, bottom)}]}
    return out


def security_context(privileged: bool) -> dict:
    """IPC_LOCK lets libfabric pin host buffers. NIXL's LIBFABRIC backend also registers GPU
    memory (fi_mr_reg on VRAM), which needs privileged on EKS ("IPC_LOCK alone is
    insufficient", docs/sources.md#nixl-privileged); only those containers get it."""
    out: dict = {"capabilities": {"add": ["IPC_LOCK"]}}
    if privileged:
        out["privileged"] = True
    return out


def identify(obj: dict) -> str:
    """``Kind namespace/name``: how violations and schema problems name an object."""
    meta = obj.get("metadata") or {}
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{obj.get('kind', '?')} {where}{meta.get('name', '?')}"
