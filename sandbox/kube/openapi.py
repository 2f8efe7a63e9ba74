"""OpenAPI v3 documents, only as much as kubectl needs.

kubectl reads ``/openapi/v3`` to learn whether the server validates fields itself (a
``fieldValidation`` parameter on the PATCH operation of the resource's path). When it does,
kubectl sends ``fieldValidation=Strict`` and skips client-side schema validation. No schemas
are published: kubectl then falls back to its compiled-in types for strategic merge patches.
"""

from __future__ import annotations

import hashlib
import json

from sandbox.kube.resources import RESOURCES, group_versions

_WRITE_PARAMS = ["dryRun", "fieldManager", "fieldValidation"]


def _param(name: str, where: str = "query", kind: str = "string") -> dict:
    p = {"name": name, "in": where, "schema": {"type": kind, "uniqueItems": True}}
    if where == "path":
        p["required"] = True
    return p


def _gv_paths(group: str, version: str) -> dict:
    prefix = f"/apis/{group}/{version}" if group else f"/api/{version}"
    paths = {}
    for r in RESOURCES:
        if r.group != group or r.version != version:
            continue
        gvk = {"group": r.group, "version": r.version, "kind": r.kind}
        base = f"{prefix}/namespaces/{{namespace}}/{r.plural}" if r.namespaced else \
            f"{prefix}/{r.plural}"
        path_params = [_param("namespace", "path")] if r.namespaced else []

        def op(action, extra=()):
            return {"operationId": f"{action}{r.kind}", "parameters": [_param(n) for n in extra],
                    "responses": {"200": {"description": "OK"}},
                    "x-kubernetes-action": action, "x-kubernetes-group-version-kind": gvk}

        paths[base] = {"get": op("list", ["labelSelector", "fieldSelector", "watch"]),
                       "post": op("post", _WRITE_PARAMS),
                       "parameters": path_params}
        item = {"get": op("get"), "put": op("put", _WRITE_PARAMS),
                "patch": op("patch", _WRITE_PARAMS + ["force"]),
                "delete": op("delete", ["dryRun", "propagationPolicy"]),
                "parameters": path_params + [_param("name", "path")]}
        paths[f"{base}/{{name}}"] = item
        if r.has_status:
            paths[f"{base}/{{name}}/status"] = dict(item)
    return paths


def _doc(group: str, version: str) -> dict:
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.33.5"},
            "paths": _gv_paths(group, version), "components": {"schemas": {}}}


def _all_gvs() -> list[tuple[str, str]]:
    gvs = [("", "v1")]
    for g, versions in group_versions().items():
        gvs += [(g, v) for v in versions]
    return gvs


def _rel(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def document(segments: list[str], query: dict) -> dict | None:
    if segments == ["v3"]:
        out = {}
        for g, v in _all_gvs():
            digest = hashlib.sha256(json.dumps(_doc(g, v), sort_keys=True).encode()).hexdigest()
            out[_rel(g, v)] = {"serverRelativeURL": f"/openapi/v3/{_rel(g, v)}?hash={digest.upper()}"}
        return {"paths": out}
    if segments[:1] == ["v3"]:
        rel = "/".join(segments[1:])
        for g, v in _all_gvs():
            if rel == _rel(g, v):
                return _doc(g, v)
        return None
    if segments == ["v2"]:
        paths = {}
        for g, v in _all_gvs():
            paths.update(_gv_paths(g, v))
        return {"swagger": "2.0", "info": {"title": "Kubernetes", "version": "v1.33.5"},
                "paths": paths, "definitions": {}}
    return None
