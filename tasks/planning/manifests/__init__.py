"""The 2P2D serving stack as Kubernetes objects: render, check the invariants, check the schemas.

    render_stack(bp, colour, weights_host_path, namespace=None) -> list[dict]   (apply order)
    render_production_service(bp, live_colour) -> dict
    check_invariants(manifests, bp) -> list[Violation]
    schema_problems(manifests, k8s_version="1.33") -> list[SchemaProblem]
    render_checked(...)  -> list[dict], or ConfigError naming every problem
    to_yaml(objects) -> str

Pure: no Kubernetes client, no network. ``schema_check`` reads the LWS CRD from the package.
"""

from __future__ import annotations

from blueprints.schema import Blueprint
from tasks.errors import ConfigError
from tasks.planning.manifests.common import colour_namespace, stable_namespace
from tasks.planning.manifests.invariants import Violation, check_invariants
from tasks.planning.manifests.render import render_production_service, render_stack, to_yaml
from tasks.planning.manifests.schema_check import K8S_VERSION, SchemaProblem, schema_problems

__all__ = ["ConfigError", "SchemaProblem", "Violation", "check_invariants", "colour_namespace",
           "render_checked", "render_production_service", "render_stack", "schema_problems",
           "stable_namespace", "to_yaml"]


def render_checked(bp: Blueprint, colour: str, weights_host_path: str, namespace: str | None = None,
                   *, router_image: str | None = None, k8s_version: str = K8S_VERSION) -> list[dict]:
    """The colour's objects, or a ConfigError listing every invariant and schema problem."""
    objects = render_stack(bp, colour, weights_host_path, namespace, router_image=router_image)
    problems = [str(v) for v in check_invariants(objects, bp)]
    problems += [f"schema: {p}" for p in schema_problems(objects, k8s_version)]
    if problems:
        raise ConfigError("the rendered stack is not safe to apply:\n  " + "\n  ".join(problems))
    return objects
