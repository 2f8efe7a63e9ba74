"""Every rendered object against its schema, before anything reaches the API server.

Core and apps objects: the Kubernetes OpenAPI schemas bundled with ``kubernetes-validate``, in
strict mode (unknown fields are errors), for the cluster's minor version (EKS 1.33, the
blueprint's AMI default). LeaderWorkerSets: the CRD schema kept in
``blueprints/crds/leaderworkerset-v1.yaml`` (read from the package, the only I/O here), closed
the same way, and each of their pod templates as a core/v1 PodTemplateSpec.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass
from importlib import resources

import jsonschema
import kubernetes_validate
import yaml

from tasks.planning.manifests.common import identify

K8S_VERSION = "1.33"
LWS_API, LWS_KIND = "leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"
CRD_RESOURCE = ("crds", "leaderworkerset-v1.yaml")


@dataclass(frozen=True)
class SchemaProblem:
    where: str
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.path or '(object)'}: {self.message}"


def schema_problems(manifests: list[dict], k8s_version: str = K8S_VERSION) -> list[SchemaProblem]:
    out: list[SchemaProblem] = []
    for obj in manifests:
        if obj.get("apiVersion") == LWS_API and obj.get("kind") == LWS_KIND:
            out += _lws_problems(obj, k8s_version)
        else:
            out += _core_problems(obj, identify(obj), k8s_version)
    return out


def _core_problems(obj: dict, where: str, version: str, prefix: tuple = ()) -> list[SchemaProblem]:
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as e:
        path = list(e.path)[len(prefix):] if list(e.path)[:len(prefix)] == list(prefix) else list(e.path)
        return [SchemaProblem(where, _path(path), e.message)]
    except kubernetes_validate.SchemaNotFoundError as e:
        return [SchemaProblem(where, "", e.message)]
    return []


def _lws_problems(obj: dict, version: str) -> list[SchemaProblem]:
    where = identify(obj)
    out = [SchemaProblem(where, _path(e.absolute_path), e.message)
           for e in sorted(_lws_validator().iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))]
    lwt = (obj.get("spec") or {}).get("leaderWorkerTemplate") or {}
    for key in ("leaderTemplate", "workerTemplate"):
        template = lwt.get(key)
        if isinstance(template, dict):
            wrapped = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "lws"}, "template": template}
            out += [SchemaProblem(p.where, f"spec.leaderWorkerTemplate.{key}" + (f".{p.path}" if p.path else ""),
                                  p.message)
                    for p in _core_problems(wrapped, where, version, prefix=("template",))]
    return out


def _path(parts) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def lws_crd() -> dict:
    text = resources.files("blueprints").joinpath(*CRD_RESOURCE).read_text(encoding="utf-8")
    return yaml.safe_load(text)


@functools.lru_cache(maxsize=1)
def _lws_validator() -> jsonschema.protocols.Validator:
    crd = lws_crd()
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    schema = _closed(copy.deepcopy(version["schema"]["openAPIV3Schema"]))
    return jsonschema.Draft7Validator(schema)


def _closed(schema: dict) -> dict:
    """Unknown fields are errors, as with server-side field validation Strict (the API server
    would otherwise prune them silently, e.g. a misspelt startupPolicy)."""
    if isinstance(schema.get("properties"), dict) and not schema.get("x-kubernetes-preserve-unknown-fields"):
        schema.setdefault("additionalProperties", False)
    for sub in (schema.get("properties") or {}).values():
        _closed(sub)
    if isinstance(schema.get("items"), dict):
        _closed(schema["items"])
    for sub in schema.get("anyOf") or []:
        _closed(sub)
    return schema
