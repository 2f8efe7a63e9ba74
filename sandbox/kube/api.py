"""The API verbs (create, get, list, replace, patch, apply, delete) over the store.

This layer owns what the real API server does around a write: metadata (uid, timestamps,
generation), defaulting, validation, status/spec separation, optimistic concurrency,
managed fields, cascading deletion. The HTTP layer only routes and serializes; controllers
write through ``Api`` too, so their writes look the same to watchers.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import uuid

import yaml

from sandbox.kube import errors, patching, resources, ssa
from sandbox.kube.defaults import ClusterIPs, apply_defaults
from sandbox.kube.selectors import FieldSelector, LabelSelector
from sandbox.kube.store import Store, clone
from sandbox.kube.validation import validate, validate_update

_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"


def now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def random_suffix(n: int = 5) -> str:
    return "".join(random.choice(_NAME_CHARS) for _ in range(n))


def _spec_part(obj: dict) -> dict:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


class Api:
    def __init__(self, store: Store):
        self.store = store
        self.cluster_ips = ClusterIPs()
        ns_rt = resources.lookup("", "v1", "namespaces")
        for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
            self.create(ns_rt, None, {"metadata": {"name": ns}}, "kube-apiserver")
        crd_rt = resources.lookup("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        self.create(crd_rt, None, resources.lws_crd(), "helm")

    # --- reads ---------------------------------------------------------------------------

    def get(self, rt, ns: str | None, name: str) -> dict:
        obj = self.store.get(rt, ns or "", name)
        if obj is None:
            raise errors.not_found(rt, name)
        return obj

    def list(self, rt, ns: str | None, label: str | None = None,
             field: str | None = None) -> tuple[list[dict], int]:
        with self.store.lock:
            rv = self.store.resource_version
            items = self.store.list(rt, ns if rt.namespaced else None)
        lsel, fsel = LabelSelector.parse(label), FieldSelector.parse(field)
        items = [o for o in items
                 if lsel.matches(o["metadata"].get("labels")) and fsel.matches(o)]
        return items, rv

    # --- writes --------------------------------------------------------------------------

    def _check_namespace(self, rt, ns: str | None, body: dict) -> None:
        if not rt.namespaced:
            return
        body_ns = body.get("metadata", {}).get("namespace")
        if body_ns and ns and body_ns != ns:
            raise errors.bad_request("the namespace of the provided object does not match "
                                     "the namespace sent on the request")
        ns = ns or body_ns
        if not ns:
            raise errors.bad_request("an empty namespace may not be set during creation")
        namespace = self.store.get(resources.lookup("", "v1", "namespaces"), "", ns)
        if namespace is None:
            raise errors.namespace_not_found(ns)
        if namespace["metadata"].get("deletionTimestamp"):
            # NamespaceLifecycle admission (apiserver pkg/admission/plugin/namespace/lifecycle/
            # admission.go) adds a NamespaceTerminating cause on metadata.namespace.
            raise errors.ApiError(403, "Forbidden", f"{rt.qualified} is forbidden: unable to "
                                  f"create new content in namespace {ns} because it is being "
                                  "terminated", {"kind": rt.plural, "causes": [
                                      {"reason": "NamespaceTerminating",
                                       "message": f"namespace {ns} is being terminated",
                                       "field": "metadata.namespace"}]})

    def _parse_body(self, rt, ns, body) -> dict:
        if not isinstance(body, dict):
            raise errors.bad_request("the request body must be a JSON object")
        body = clone(body)
        api_version, kind = body.get("apiVersion"), body.get("kind")
        if (api_version and api_version != rt.api_version) or (kind and kind != rt.kind):
            raise errors.bad_request(
                f"the API version in the data ({api_version}) does not match the expected "
                f"API version ({rt.api_version}) or kind ({kind} vs {rt.kind})")
        body["apiVersion"], body["kind"] = rt.api_version, rt.kind
        meta = body.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be an object")
        if rt.namespaced:
            meta["namespace"] = ns or meta.get("namespace")
        else:
            meta.pop("namespace", None)
        return body

    def create(self, rt, ns: str | None, body: dict, manager: str, dry_run: bool = False) -> dict:
        obj = self._parse_body(rt, ns, body)
        meta = obj["metadata"]
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + random_suffix()
        self._check_namespace(rt, meta.get("namespace"), obj)
        for k in ("resourceVersion", "uid", "managedFields", "deletionTimestamp"):
            meta.pop(k, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_iso()
        if rt.generation:
            meta["generation"] = 1
        if rt.has_status and rt.kind not in ("Namespace", "Node", "CustomResourceDefinition"):
            obj["status"] = {}  # status is the controllers' to write
        apply_defaults(rt, obj, self.cluster_ips)
        causes = validate(rt, obj)
        if causes:
            raise errors.invalid(rt, meta.get("name", ""), causes)
        ssa.track_update(None, obj, manager, rt.api_version, meta["creationTimestamp"])
        with self.store.lock:
            if self.store.get(rt, meta.get("namespace", ""), meta["name"]) is not None:
                raise errors.already_exists(rt, meta["name"])
            if dry_run:
                return obj
            created = self.store.create(rt, obj)
            if rt.kind == "Namespace":
                sa = resources.lookup("", "v1", "serviceaccounts")
                self.create(sa, meta["name"], {"metadata": {"name": "default"}},
                            "kube-controller-manager")
            return created

    def _commit(self, rt, old: dict, new: dict, manager: str | None, sub: str | None,
                dry_run: bool = False) -> dict:
        """Write ``new`` over ``old`` keeping what clients may not change."""
        new = clone(new)
        meta, old_meta = new.setdefault("metadata", {}), old["metadata"]
        sent_rv = meta.get("resourceVersion")
        if sent_rv and sent_rv != old_meta.get("resourceVersion"):
            raise errors.stale(rt, old_meta["name"])
        if sub == "status":
            result = clone(old)
            result["status"] = new.get("status", {})
        else:
            result = new
            for k in ("uid", "creationTimestamp", "name", "namespace", "generation",
                      "managedFields", "deletionTimestamp"):
                if k in old_meta:
                    meta[k] = old_meta[k]
                else:
                    meta.pop(k, None)
            result["apiVersion"], result["kind"] = rt.api_version, rt.kind
            if rt.has_status:
                result["status"] = clone(old.get("status", {}))
            apply_defaults(rt, result, self.cluster_ips)
            causes = validate_update(rt, old, result)
            if causes:
                raise errors.invalid(rt, old_meta["name"], causes)
            if rt.generation and _spec_part(result) != _spec_part(old):
                meta["generation"] = old_meta.get("generation", 1) + 1
            if manager is not None:
                ssa.track_update(old, result, manager, rt.api_version, now_iso())
        result["metadata"]["resourceVersion"] = old_meta.get("resourceVersion")
        if dry_run:
            return result
        with self.store.lock:
            current = self.store.get(rt, old_meta.get("namespace", ""), old_meta["name"])
            if current is None:
                raise errors.not_found(rt, old_meta["name"])
            if current["metadata"].get("resourceVersion") != old_meta.get("resourceVersion"):
                raise errors.stale(rt, old_meta["name"])
            return self.store.update(rt, result)

    def replace(self, rt, ns, name: str, body: dict, manager: str, sub: str | None = None,
                dry_run: bool = False) -> dict:
        body = self._parse_body(rt, ns, body)
        if body["metadata"].get("name") not in (None, name):
            raise errors.bad_request("the name of the object does not match the name on the URL")
        old = self.get(rt, ns, name)
        return self._commit(rt, old, body, manager, sub, dry_run)

    def patch(self, rt, ns, name: str, raw: bytes, content_type: str, manager: str | None,
              force: bool = False, sub: str | None = None,
              dry_run: bool = False) -> tuple[dict, bool]:
        """Returns (object, created)."""
        ctype = (content_type or "").split(";")[0].strip()
        try:
            if ctype == "application/apply-patch+yaml":
                body = yaml.safe_load(raw.decode() or "{}")
            else:
                body = json.loads(raw.decode() or "null")
        except (ValueError, yaml.YAMLError) as e:
            raise errors.bad_request(f"error decoding patch: {e}") from e
        if ctype == "application/apply-patch+yaml":
            if not manager:
                raise errors.bad_request("PATCH requests of type apply need a fieldManager")
            return self._apply(rt, ns, name, body, manager, force, dry_run)
        old = self.get(rt, ns, name)
        if ctype == "application/merge-patch+json":
            new = patching.json_merge_patch(old, body)
        elif ctype == "application/strategic-merge-patch+json":
            if rt.group == resources.LWS_GROUP:
                raise errors.unsupported_media_type(ctype)
            new = patching.strategic_merge_patch(old, body)
        elif ctype == "application/json-patch+json":
            new = patching.json_patch(old, body)
        else:
            raise errors.unsupported_media_type(ctype)
        if not (isinstance(body, dict) and body.get("metadata", {}).get("resourceVersion")):
            new.setdefault("metadata", {}).pop("resourceVersion", None)
        return self._commit(rt, old, new, manager, sub, dry_run), False

    def _apply(self, rt, ns, name, config, manager, force, dry_run) -> tuple[dict, bool]:
        if not isinstance(config, dict):
            raise errors.bad_request("an apply configuration must be an object")
        config = self._parse_body(rt, ns, config)
        cmeta = config["metadata"]
        if cmeta.get("name") not in (None, name):
            raise errors.bad_request("the name of the object does not match the name on the URL")
        cmeta["name"] = name
        with self.store.lock:
            old = self.store.get(rt, ns or "", name)
            if old is None:
                created = self.create(rt, ns, config, manager, dry_run=True)
                created["metadata"]["managedFields"] = ssa.apply_entry(
                    config, manager, rt.api_version, created["metadata"]["creationTimestamp"])
                if dry_run:
                    return created, True
                return self.store.create(rt, created), True
            if cmeta.get("resourceVersion") and cmeta["resourceVersion"] != \
                    old["metadata"]["resourceVersion"]:
                raise errors.stale(rt, name)
            cmeta.pop("resourceVersion", None)
            merged = ssa.apply(old, config, manager, force, rt.api_version, now_iso())
            managed = merged["metadata"]["managedFields"]
            result = self._commit(rt, old, merged, None, None, dry_run=True)
            result["metadata"]["managedFields"] = managed
            if dry_run:
                return result, False
            return self.store.update(rt, result), False

    # --- deletes -------------------------------------------------------------------------

    def dependents(self, owner_uid: str, ns: str | None) -> list[tuple]:
        found = []
        for rt in resources.RESOURCES:
            if rt.namespaced and ns is None:
                items = self.store.list(rt)
            elif rt.namespaced:
                items = self.store.list(rt, ns)
            else:
                items = self.store.list(rt)
            for o in items:
                refs = o["metadata"].get("ownerReferences") or []
                if any(r.get("uid") == owner_uid for r in refs):
                    found.append((rt, o))
        return found

    def delete(self, rt, ns, name: str, propagation: str = "Background",
               preconditions: dict | None = None) -> dict:
        with self.store.lock:
            obj = self.get(rt, ns, name)
            pre_uid = (preconditions or {}).get("uid")
            if pre_uid and pre_uid != obj["metadata"]["uid"]:
                raise errors.ApiError(409, "Conflict", "Precondition failed: UID in precondition: "
                                      f"{pre_uid}, UID in object meta: {obj['metadata']['uid']}")
            uid = obj["metadata"]["uid"]
            if rt.kind == "Namespace":
                # Namespaces terminate: the namespace controller empties them a moment later.
                if not obj["metadata"].get("deletionTimestamp"):
                    obj["metadata"]["deletionTimestamp"] = now_iso()
                    obj["metadata"]["deletionGracePeriodSeconds"] = 0
                    obj["status"] = {"phase": "Terminating"}
                    obj = self.store.update(rt, obj)
                return obj
            deleted = self.store.delete(rt, ns or "", name)
            for child_rt, child in self.dependents(uid, ns if rt.namespaced else None):
                cmeta = child["metadata"]
                if propagation == "Orphan":
                    cmeta["ownerReferences"] = [r for r in cmeta["ownerReferences"]
                                                if r.get("uid") != uid]
                    self.store.update(child_rt, child)
                elif self.store.get(child_rt, cmeta.get("namespace", ""), cmeta["name"]):
                    self.delete(child_rt, cmeta.get("namespace"), cmeta["name"], propagation)
            return deleted

    def finalize_namespace(self, name: str) -> None:
        """Delete everything in a terminating namespace, then the namespace."""
        with self.store.lock:
            for child_rt in resources.RESOURCES:
                if child_rt.namespaced:
                    for child in self.store.list(child_rt, name):
                        self.store.delete(child_rt, name, child["metadata"]["name"])
            self.store.delete(resources.lookup("", "v1", "namespaces"), "", name)

    def delete_collection(self, rt, ns, label: str | None, field: str | None) -> list[dict]:
        items, _ = self.list(rt, ns, label, field)
        out = []
        for o in items:
            try:
                out.append(self.delete(rt, o["metadata"].get("namespace"), o["metadata"]["name"]))
            except errors.ApiError:
                continue  # deleted meanwhile (e.g. by a cascade)
        return out

    # --- controller helpers --------------------------------------------------------------

    def mutate(self, rt, obj: dict, change) -> dict | None:
        """Apply ``change(current)`` to the latest stored copy of ``obj`` and store it, so a
        controller never writes back a stale copy over a client's change."""
        with self.store.lock:
            current = self.store.get(rt, obj["metadata"].get("namespace", ""),
                                     obj["metadata"]["name"])
            if current is None or current["metadata"]["uid"] != obj["metadata"]["uid"]:
                return None
            change(current)
            return self.store.update(rt, current)

    def write_status(self, rt, obj: dict, status: dict) -> dict:
        """Set ``status`` on the latest stored copy of ``obj`` (no-op when unchanged)."""
        with self.store.lock:
            current = self.store.get(rt, obj["metadata"].get("namespace", ""),
                                     obj["metadata"]["name"])
            if current is None or current["metadata"]["uid"] != obj["metadata"]["uid"]:
                return obj
            if current.get("status") == status:
                return current
            current["status"] = status
            return self.store.update(rt, current)
