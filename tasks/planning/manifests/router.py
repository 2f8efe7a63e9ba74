"""The PD router of one colour (Deployment + Service) and the production Service. Pure.

Static worker URLs through the leader Services, not Kubernetes discovery: no RBAC to grant,
and the router lists exactly the workers pdlift rendered. The routers of both colours live in
the stable namespace beside the production Service, whose selector names the live colour; the
promotion stage switches that selector (``render_production_service`` with the new colour).
"""

from __future__ import annotations

from blueprints.schema import Blueprint
from tasks.planning.manifests import common
from tasks.planning.manifests.pods import RoleSpec, leader_url

ROUTER_NAMES = {"vllm": "vllm-router", "sglang": "sglang-router"}
ROUTER_REPLICAS = 2  # stateless; two so a node drain does not drop production traffic
PRODUCTION_PORT = 80


def router_name(colour: str) -> str:
    return f"router-{colour}"


def router_args(bp: Blueprint, engines_ns: str, prefill: RoleSpec, decode: RoleSpec,
                kv_connector: str | None) -> list[str]:
    pre = [leader_url(engines_ns, prefill)]
    if prefill.expose_bootstrap and prefill.bootstrap_port:
        pre.append(str(prefill.bootstrap_port))  # the bootstrap port follows the prefill URL
    shared = ["--host", "0.0.0.0", "--port", str(bp.engine.router_port), "--prefill", *pre,
              "--decode", leader_url(engines_ns, decode),
              "--prefill-policy", "cache_aware", "--decode-policy", "power_of_two",
              # The router starts last but the engines may still be loading (10-45 min).
              "--worker-startup-timeout-secs", str(common.STARTUP_BUDGET_S)]
    if bp.engine.name == "vllm":
        return ["vllm-router", "--vllm-pd-disaggregation", *shared, "--kv-connector", kv_connector or ""]
    return ["python3", "-m", "sglang_router.launch_router", "--pd-disaggregation", *shared]


def router_labels(bp: Blueprint, colour: str) -> dict[str, str]:
    return common.labels(bp, colour, common.ROUTER, ROUTER_NAMES[bp.engine.name])


def selector(bp: Blueprint, colour: str) -> dict[str, str]:
    return {common.DEPLOYMENT_LABEL: bp.name, common.COLOUR_LABEL: colour, "app.kubernetes.io/component": common.ROUTER}


def deployment(bp: Blueprint, colour: str, namespace: str, argv: list[str], image: str) -> dict:
    port = bp.engine.router_port
    container = {
        "name": "router", "image": common.require_digest(image, "router image"), "imagePullPolicy": "IfNotPresent",
        "command": argv[:1], "args": argv[1:],
        "ports": [{"name": "http", "containerPort": port}],
        "env": [common.field_env("POD_NAME", "metadata.name"), common.field_env("POD_NAMESPACE", "metadata.namespace")],
        "resources": {"requests": {"cpu": "4", "memory": "8Gi"}, "limits": {"memory": "8Gi"}},
        "readinessProbe": common.http_probe("/readiness", port, failure_threshold=3, period=5),
        "livenessProbe": common.http_probe("/liveness", port, failure_threshold=6, period=10),
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    pod_labels = router_labels(bp, colour)
    spread = {"weight": 100, "podAffinityTerm": {"labelSelector": {"matchLabels": selector(bp, colour)},
                                                 "topologyKey": common.HOSTNAME}}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": common.meta(router_name(colour), namespace, pod_labels),
        "spec": {
            "replicas": ROUTER_REPLICAS,
            "selector": {"matchLabels": selector(bp, colour)},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {"serviceAccountName": common.ROUTER_SA, "automountServiceAccountToken": False,
                         "enableServiceLinks": False,
                         "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [spread]}},
                         "containers": [container]},
            },
        },
    }


def colour_service(bp: Blueprint, colour: str, namespace: str) -> dict:
    """The candidate's own entry point: the canary and the benchmark target it before promotion."""
    port = bp.engine.router_port
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": common.meta(router_name(colour), namespace, router_labels(bp, colour)),
            "spec": {"type": "ClusterIP", "selector": selector(bp, colour),
                     "ports": [{"name": "http", "port": port, "targetPort": port, "protocol": "TCP"}]}}


def production_service(bp: Blueprint, colour: str) -> dict:
    common.check_colour(colour)
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": common.meta(bp.name, common.stable_namespace(bp),
                               {common.DEPLOYMENT_LABEL: bp.name, "app.kubernetes.io/part-of": bp.name,
                                "app.kubernetes.io/managed-by": "pdlift", "app.kubernetes.io/component": "production"},
                               {"pdlift.io/live-colour": colour}),
            "spec": {"type": "ClusterIP", "selector": selector(bp, colour),
                     "ports": [{"name": "http", "port": PRODUCTION_PORT, "targetPort": bp.engine.router_port,
                                "protocol": "TCP"}]}}
