"""One role (prefill or decode) as a LeaderWorkerSet plus the Service in front of its leader.

Leader and workers get separate templates: only the leader serves HTTP (vLLM ``--headless``
workers have no port to probe), so only the leader has startup/readiness probes. SGLang's
non-zero ranks do answer ``/health``; their template probes that.

``startupPolicy: LeaderCreated``, not ``LeaderReady``: these leaders become Ready only after
every rank has joined their rendezvous (torch.distributed for PP, the DP coordinator, SGLang's
dist-init), so waiting for a Ready leader before creating workers would deadlock until the
startup probe gave up. LeaderReady suits Ray layouts, whose head is Ready on its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from blueprints.schema import Blueprint
from tasks.planning.manifests import common
from tasks.planning.manifests.cmdline import Line, container_command

LWS_API = "leaderworkerset.x-k8s.io/v1"


@dataclass(frozen=True)
class RoleSpec:
    role: str  # prefill | decode
    engine: str  # vllm | sglang (app.kubernetes.io/name)
    leader: list[Line]
    worker: list[Line]
    env: list[dict]
    port: int
    bootstrap_port: int | None  # the KV bootstrap / side channel this role serves
    privileged: bool
    startup_path: str
    readiness_path: str
    worker_probe_path: str | None
    annotations: dict[str, str] = field(default_factory=dict)
    expose_bootstrap: bool = False  # the router hands the leader Service's bootstrap port on
    worker_bootstrap: bool = False  # every rank serves a side channel (NIXL), not only the leader

    @property
    def lws_name(self) -> str:
        return self.role

    @property
    def service_name(self) -> str:
        return f"{self.role}-leader"


def _container(bp: Blueprint, spec: RoleSpec, lines: list[Line], leader: bool) -> dict:
    probe_path = spec.startup_path if leader else spec.worker_probe_path
    readiness_path = spec.readiness_path if leader else spec.worker_probe_path
    ports = [{"name": "http", "containerPort": spec.port}] if probe_path else []
    if spec.bootstrap_port and (leader or spec.worker_bootstrap):
        ports.append({"name": "kv-bootstrap", "containerPort": spec.bootstrap_port})
    out = {"name": common.ENGINE_CONTAINER, "image": common.require_digest(bp.engine.image),
           "imagePullPolicy": "IfNotPresent", **container_command(lines),
           **({"ports": ports} if ports else {}), "env": common.POD_ENV + common.env_list(common.EFA_ENV) + spec.env,
           "resources": common.engine_resources(bp), "volumeMounts": common.engine_mounts(bp),
           "securityContext": common.security_context(spec.privileged)}
    if probe_path:
        out["startupProbe"] = common.startup_probe(probe_path, spec.port)
    if readiness_path:
        out["readinessProbe"] = common.http_probe(readiness_path, spec.port, failure_threshold=3)
    # No liveness probe: the engines exit on fatal errors, and a false positive under load
    # would recreate the group and cost a 10-45 minute reload.
    return out


def _template(bp: Blueprint, colour: str, spec: RoleSpec, weights_host_path: str, leader: bool) -> dict:
    container = _container(bp, spec, spec.leader if leader else spec.worker, leader)
    pod_labels = common.labels(bp, colour, spec.role, spec.engine)
    pod_labels["pdlift.io/group-role"] = "leader" if leader else "worker"
    return {
        "metadata": {"labels": pod_labels,
                     "annotations": {"kubectl.kubernetes.io/default-container": common.ENGINE_CONTAINER,
                                     **spec.annotations}},
        "spec": {
            "serviceAccountName": common.ENGINE_SA,
            "automountServiceAccountToken": False,  # static URLs: the engines never call the API
            # Service links would inject e.g. VLLM_PORT=tcp://... for a Service named vllm,
            # which vLLM reads as its own setting.
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": common.SHUTDOWN_TIMEOUT_S + 30,
            "nodeSelector": common.node_selector(bp, spec.role),
            "affinity": common.affinity(bp, spec.role),
            "tolerations": common.tolerations(),
            "containers": [container],
            "volumes": common.engine_volumes(spec.role, weights_host_path),
        },
    }


def leader_worker_set(bp: Blueprint, colour: str, namespace: str, spec: RoleSpec,
                      weights_host_path: str) -> dict:
    nodes = bp.topology.prefill.nodes if spec.role == common.PREFILL else bp.topology.decode.nodes
    template: dict = {
        "size": nodes,
        # A lost rank breaks the group's NCCL communicators: restart the whole group.
        "restartPolicy": "RecreateGroupOnPodRestart",
        "leaderTemplate": _template(bp, colour, spec, weights_host_path, leader=True),
        "workerTemplate": _template(bp, colour, spec, weights_host_path, leader=False),
    }
    return {
        "apiVersion": LWS_API, "kind": "LeaderWorkerSet",
        "metadata": common.meta(spec.lws_name, namespace, common.labels(bp, colour, spec.role, spec.engine),
                           spec.annotations),
        "spec": {
            "replicas": 1,
            "startupPolicy": "LeaderCreated",
            # No spare GPUs for a surge; new versions arrive as a new colour anyway.
            "rolloutStrategy": {"type": "RollingUpdate",
                                "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": 0}},
            "leaderWorkerTemplate": template,
        },
    }


def leader_service(bp: Blueprint, colour: str, namespace: str, spec: RoleSpec) -> dict:
    """The leader's stable name for the router (LWS itself owns the headless Service named
    after the set, so this one is ``<role>-leader``)."""
    ports = [{"name": "http", "port": spec.port, "targetPort": spec.port, "protocol": "TCP"}]
    if spec.expose_bootstrap and spec.bootstrap_port:
        ports.append({"name": "kv-bootstrap", "port": spec.bootstrap_port,
                      "targetPort": spec.bootstrap_port, "protocol": "TCP"})
    selector = {common.DEPLOYMENT_LABEL: bp.name, common.COLOUR_LABEL: colour, common.LWS_NAME_LABEL: spec.lws_name,
                common.LWS_WORKER_INDEX_LABEL: "0"}
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": common.meta(spec.service_name, namespace, common.labels(bp, colour, spec.role, spec.engine)),
            "spec": {"type": "ClusterIP", "selector": selector, "ports": ports}}


def leader_url(namespace: str, spec: RoleSpec) -> str:
    return f"http://{spec.service_name}.{namespace}.svc.cluster.local:{spec.port}"
