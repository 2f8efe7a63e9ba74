"""Blueprint -> the Kubernetes objects of one colour of the 2P2D stack, in apply order. Pure.

Apply order: namespaces, service accounts, the leader Services, prefill and decode
LeaderWorkerSets, then the router (its Service, then its Deployment), last. The production
Service is not part of a colour: ``render_production_service`` renders it for the live colour
(the deploy stage creates it once; promotion switches it).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import posixpath

import yaml

from blueprints.schema import Blueprint
from tasks.errors import ConfigError
from tasks.planning.manifests import common
from tasks.planning.manifests import kv, pods, router, sglang, vllm

ENGINES = {"vllm": vllm, "sglang": sglang}


def render_stack(bp: Blueprint, colour: str, weights_host_path: str, namespace: str | None = None,
                 *, router_image: str | None = None) -> list[dict]:
    """Every object of colour ``colour``; ``namespace`` overrides ``<bp.name>-<colour>`` for the
    engines. ``weights_host_path`` is the staged model directory on each node's NVMe.
    ``router_image`` defaults to the engine image (vLLM and SGLang images ship their routers)."""
    common.check_colour(colour)
    if not posixpath.isabs(weights_host_path) or ".." in weights_host_path.split("/"):
        raise ConfigError(f"weights_host_path must be an absolute path without '..', got {weights_host_path!r}")
    common.require_digest(bp.engine.image)
    engines_ns = namespace or common.colour_namespace(bp, colour)
    stable_ns = common.stable_namespace(bp)
    if engines_ns == stable_ns:
        raise ConfigError(f"the engines' namespace must differ from the stable namespace {stable_ns!r}")
    module = ENGINES[bp.engine.name]
    prefill, decode = _annotated(bp, module.prefill(bp)), _annotated(bp, module.decode(bp))
    revision = stack_revision(bp, prefill, decode, weights_host_path)
    connector = kv.ROUTER_CONNECTOR[bp.kv_transfer.connector] if bp.engine.name == "vllm" else None
    argv = router.router_args(bp, engines_ns, prefill, decode, connector)
    objects = [
        _namespace(engines_ns, {common.DEPLOYMENT_LABEL: bp.name, common.COLOUR_LABEL: colour,
                                "app.kubernetes.io/managed-by": "pdlift"}),
        _namespace(stable_ns, {common.DEPLOYMENT_LABEL: bp.name, "app.kubernetes.io/managed-by": "pdlift"}),
        _service_account(bp, colour, engines_ns, common.ENGINE_SA, "engine"),
        _service_account(bp, colour, stable_ns, common.ROUTER_SA, common.ROUTER),
        pods.leader_service(bp, colour, engines_ns, prefill),
        pods.leader_service(bp, colour, engines_ns, decode),
        pods.leader_worker_set(bp, colour, engines_ns, prefill, weights_host_path),
        pods.leader_worker_set(bp, colour, engines_ns, decode, weights_host_path),
        router.colour_service(bp, colour, stable_ns),
        router.deployment(bp, colour, stable_ns, argv, router_image or bp.engine.image),
    ]
    for lws in objects[6:8]:
        _label_revision(lws, revision)
    # A JSON round trip: plain JSON types only, and no shared sub-objects (deepcopy would keep
    # the sharing), so a caller may patch one object safely.
    return json.loads(json.dumps(objects))


def stack_revision(bp: Blueprint, prefill: pods.RoleSpec, decode: pods.RoleSpec, weights_host_path: str) -> str:
    """A short hash of everything both roles' engines are given; the same in either colour."""
    payload = {"image": bp.engine.image, "weights": weights_host_path,
               "roles": [dataclasses.asdict(prefill), dataclasses.asdict(decode)]}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _annotated(bp: Blueprint, spec: pods.RoleSpec) -> pods.RoleSpec:
    return dataclasses.replace(spec, annotations={**spec.annotations,
                                                  common.MODEL_REVISION_ANNOTATION: bp.model.revision})


def _label_revision(lws: dict, revision: str) -> None:
    lws["metadata"]["labels"][common.REVISION_LABEL] = revision
    lwt = lws["spec"]["leaderWorkerTemplate"]
    for key in ("leaderTemplate", "workerTemplate"):
        if key in lwt:
            lwt[key]["metadata"]["labels"][common.REVISION_LABEL] = revision


def render_production_service(bp: Blueprint, live_colour: str) -> dict:
    return router.production_service(bp, live_colour)


def _namespace(name: str, labels: dict[str, str]) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def _service_account(bp: Blueprint, colour: str, namespace: str, name: str, component: str) -> dict:
    labels = {common.DEPLOYMENT_LABEL: bp.name, "app.kubernetes.io/managed-by": "pdlift",
              "app.kubernetes.io/component": component}
    if component != common.ROUTER:  # the router account is shared by both colours' routers
        labels[common.COLOUR_LABEL] = colour
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": common.meta(name, namespace, labels),
            "automountServiceAccountToken": False}


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: object) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None  # scripts as literal blocks, readable in review
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def to_yaml(objects: list[dict]) -> str:
    """A multi-document YAML stream in the given order, keys in rendering order."""
    return yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120,
                         explicit_start=True)
