"""What production answers while a ``recreate`` has no engines up: 503 with Retry-After. Pure.

A one-replica Deployment in the stable namespace running a few lines of Python from the engine
image (vLLM and SGLang images both ship python3, so nothing else is pulled onto a fleet that may
have no registry access mid-maintenance). Every path answers ``503`` with ``Retry-After`` and an
OpenAI-style error body, except the readiness path, so the production Service is switched to it
only once it answers. It listens on its own port (``MAINTENANCE_PORT``): switching production to
it changes the Service's selector and targetPort in one apply, and switching back re-applies the
ordinary production Service.
"""

from __future__ import annotations

from blueprints.schema import Blueprint
from tasks.planning.manifests import common
from tasks.planning.manifests.router import PRODUCTION_PORT

MAINTENANCE = "maintenance"
MAINTENANCE_PORT = 8090
READY_PATH = "/pdlift-maintenance/ready"

# Binds POD_IP (the pod's own address; on the sandbox, its node's loopback address).
SERVER = """\
import http.server, json, os
RETRY_AFTER, READY = os.environ["RETRY_AFTER_S"], os.environ["READY_PATH"]
BODY = json.dumps({"error": {"message": "down for maintenance: a new version is being brought up; retry after "
                             + RETRY_AFTER + " s", "type": "service_unavailable", "code": 503}}).encode()
class H(http.server.BaseHTTPRequestHandler):
    def _answer(self):
        if self.path == READY:
            self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers(); return
        self.send_response(503); self.send_header("Retry-After", RETRY_AFTER)
        self.send_header("Content-Type", "application/json"); self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(BODY)
    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _answer
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer((os.environ.get("POD_IP", "0.0.0.0"), int(os.environ["PORT"])), H).serve_forever()
"""


def labels(bp: Blueprint) -> dict[str, str]:
    return {common.DEPLOYMENT_LABEL: bp.name, "app.kubernetes.io/part-of": bp.name,
            "app.kubernetes.io/managed-by": "pdlift", "app.kubernetes.io/component": MAINTENANCE}


def selector(bp: Blueprint) -> dict[str, str]:
    return {common.DEPLOYMENT_LABEL: bp.name, "app.kubernetes.io/component": MAINTENANCE}


def deployment(bp: Blueprint, retry_after_s: int, image: str | None = None) -> dict:
    """``image``: one the nodes already hold (a recreate passes the live colour's), so nothing is
    pulled while production is down; default the blueprint's engine image."""
    env = {"PORT": str(MAINTENANCE_PORT), "RETRY_AFTER_S": str(retry_after_s), "READY_PATH": READY_PATH}
    container = {
        "name": MAINTENANCE, "image": common.require_digest(image or bp.engine.image),
        "imagePullPolicy": "IfNotPresent",
        "command": ["python3", "-c", SERVER],
        "ports": [{"name": "http", "containerPort": MAINTENANCE_PORT}],
        "env": [common.field_env("POD_IP", "status.podIP"), *common.env_list(env)],
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
        "readinessProbe": common.http_probe(READY_PATH, MAINTENANCE_PORT, failure_threshold=3, period=2),
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": common.meta(MAINTENANCE, common.stable_namespace(bp), labels(bp)),
        "spec": {"replicas": 1, "selector": {"matchLabels": selector(bp)},
                 "template": {"metadata": {"labels": labels(bp)},
                              "spec": {"automountServiceAccountToken": False, "enableServiceLinks": False,
                                       "containers": [container]}}},
    }


RESTORES_TO_ANNOTATION = "pdlift.io/restores-to"
# The run's last deploy generation when the recreate began: a deploy recorded since is this
# recreate's candidate, an older one is not (a re-run must not judge a stale candidate).
GENERATION_ANNOTATION = "pdlift.io/deploy-generation-before"


def production_service(bp: Blueprint, restores_to: str, generation_before: str = "") -> dict:
    """The production Service pointed at the maintenance responder. ``restores_to`` (the colour
    that was live) is kept on it, in the cluster where any worker finds it: a re-run after a
    recreate was cut off knows what to put back."""
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": common.meta(bp.name, common.stable_namespace(bp),
                                    {common.DEPLOYMENT_LABEL: bp.name, "app.kubernetes.io/part-of": bp.name,
                                     "app.kubernetes.io/managed-by": "pdlift",
                                     "app.kubernetes.io/component": "production"},
                                    {"pdlift.io/live-colour": MAINTENANCE, RESTORES_TO_ANNOTATION: restores_to,
                                     GENERATION_ANNOTATION: generation_before}),
            "spec": {"type": "ClusterIP", "selector": selector(bp),
                     "ports": [{"name": "http", "port": PRODUCTION_PORT, "targetPort": MAINTENANCE_PORT,
                                "protocol": "TCP"}]}}
