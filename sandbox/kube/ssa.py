"""Server-side apply and field ownership (``metadata.managedFields``, FieldsV1).

A field set is a set of paths; a path is a tuple of FieldsV1 tokens: ``f:<name>`` for a map
key, ``k:{"name":"c"}`` for an item of a keyed list, ``.`` for "this list item itself".
Atomic lists and scalars are leaves. This follows structured-merge-diff closely enough for
the rules callers see: who owns what, when an apply conflicts (409), what an apply that drops
a field removes, and that re-applying the same configuration changes nothing.
"""

from __future__ import annotations

import copy
import json

from sandbox.kube.errors import ApiError
from sandbox.kube.patching import merge_key

_SKIP_META = {"name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp",
              "managedFields", "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds",
              "generateName"}
_MISSING = object()


def _item_token(key: str, item: dict) -> str:
    return "k:" + json.dumps({key: item[key]}, separators=(",", ":"), sort_keys=True)


def _flatten(value, path: tuple, field: str, out: set) -> None:
    if value is None:
        return
    if isinstance(value, dict) and value:
        for k, v in value.items():
            _flatten(v, path + ("f:" + k,), k, out)
        return
    if isinstance(value, list):
        key = merge_key(field, value)
        if key:
            for item in value:
                ipath = path + (_item_token(key, item),)
                out.add(ipath + (".",))
                for k, v in item.items():
                    _flatten(v, ipath + ("f:" + k,), k, out)
            return
    out.add(path)


def field_set(obj: dict, include_status: bool = False) -> set[tuple]:
    out: set[tuple] = set()
    for k, v in (obj or {}).items():
        if k in ("apiVersion", "kind") or (k == "status" and not include_status):
            continue
        if k == "metadata":
            for mk, mv in (v or {}).items():
                if mk not in _SKIP_META:
                    _flatten(mv, ("f:metadata", "f:" + mk), mk, out)
            continue
        _flatten(v, ("f:" + k,), k, out)
    return out


def to_fields_v1(paths: set[tuple]) -> dict:
    root: dict = {}
    for p in sorted(paths):
        node = root
        for tok in p:
            node = node.setdefault(tok, {})
    return root


def from_fields_v1(tree: dict, prefix: tuple = ()) -> set[tuple]:
    out: set[tuple] = set()
    for k, v in (tree or {}).items():
        if v:
            out |= from_fields_v1(v, prefix + (k,))
        else:
            out.add(prefix + (k,))
    return out


def value_at(obj, path: tuple):
    node = obj
    for tok in path:
        if tok == ".":
            return node
        if tok.startswith("f:"):
            if not isinstance(node, dict) or tok[2:] not in node:
                return _MISSING
            node = node[tok[2:]]
        else:
            (k, v), = json.loads(tok[2:]).items()
            if not isinstance(node, list):
                return _MISSING
            node = next((i for i in node if isinstance(i, dict) and i.get(k) == v), _MISSING)
            if node is _MISSING:
                return node
    return node


def _differs(live, config, path: tuple) -> bool:
    a, b = value_at(live, path), value_at(config, path)
    if path[-1] == ".":
        return (a is _MISSING) != (b is _MISSING)
    return a != b


def _remove_at(obj, path: tuple) -> None:
    if path[-1] == ".":
        lst = value_at(obj, path[:-2])
        (k, v), = json.loads(path[-2][2:]).items()
        if isinstance(lst, list):
            lst[:] = [i for i in lst if not (isinstance(i, dict) and i.get(k) == v)]
        return
    parent = value_at(obj, path[:-1])
    if isinstance(parent, dict):
        parent.pop(path[-1][2:], None)


def _prune_empty_parents(obj, path: tuple, kept: set) -> None:
    """Remove maps a removal left empty (so defaulting fills them again), unless owned."""
    parent = path[:-2] if path[-1] == "." else path[:-1]
    while parent and parent[-1].startswith("f:"):
        value = value_at(obj, parent)
        if not (isinstance(value, dict) and not value) or parent in kept:
            return
        _remove_at(obj, parent)
        parent = parent[:-1]


def apply_entry(config: dict, manager: str, api_version: str, now: str) -> list[dict]:
    """managedFields of an object created by an apply: exactly the applied fields."""
    return [_entry(manager, "Apply", api_version, now, field_set(config))]


def render_path(path: tuple) -> str:
    out = ""
    for tok in path:
        if tok.startswith("f:"):
            out += "." + tok[2:]
        elif tok.startswith("k:"):
            (k, v), = json.loads(tok[2:]).items()
            out += f"[{k}={json.dumps(v)}]"
    return out


def merge(live, config, field: str | None = None):
    """Structural merge of an applied configuration into the live object."""
    if isinstance(config, dict) and isinstance(live, dict):
        out = dict(live)
        for k, v in config.items():
            if v is None:
                out.pop(k, None)
            else:
                out[k] = merge(live.get(k, _MISSING), v, k)
        return out
    if isinstance(config, list) and isinstance(live, list):
        key = merge_key(field or "", config)
        if key and all(isinstance(i, dict) and key in i for i in live):
            out = [copy.deepcopy(i) for i in live]
            for item in config:
                idx = next((n for n, i in enumerate(out) if i.get(key) == item[key]), None)
                if idx is None:
                    out.append(copy.deepcopy(item))
                else:
                    out[idx] = merge(out[idx], item)
            return out
    return copy.deepcopy(config)


def _entry(manager: str, operation: str, api_version: str, now: str, paths: set) -> dict:
    return {"manager": manager, "operation": operation, "apiVersion": api_version, "time": now,
            "fieldsType": "FieldsV1", "fieldsV1": to_fields_v1(paths)}


def _print_manager(e: dict) -> str:
    """How the API server names a conflicting manager: ``"name"`` for an Apply manager,
    ``"name" using <apiVersion>`` for an Update one (k8s.io/apimachinery
    pkg/util/managedfields/internal/conflict.go ``printManager``; v1.20: apiserver
    pkg/endpoints/handlers/fieldmanager/internal/conflict.go). The manager identifier it decodes
    never carries the time (``BuildManagerIdentifier`` clears it), so its ``at <time>`` branch
    does not occur. Checked against a real v1.20.2 server by scripts/bench/kube_contract.py."""
    name = json.dumps(e.get("manager", ""))
    return f"{name} using {e.get('apiVersion', 'v1')}" if e.get("operation") == "Update" else name


def _conflict_error(conflicts: list[tuple[dict, tuple]]) -> ApiError:
    # metav1.StatusCause: its Type is serialised as "reason".
    causes = [{"reason": "FieldManagerConflict", "message": f"conflict with {_print_manager(e)}",
               "field": render_path(p)} for e, p in conflicts]
    if len(conflicts) == 1:
        msg = f"Apply failed with 1 conflict: {causes[0]['message']}: {causes[0]['field']}"
    else:
        # getConflictMessage: grouped by manager (sorted), "conflicts with M:" then "- path" lines.
        by_manager: dict[str, list[str]] = {}
        for (e, _), cause in zip(conflicts, causes):
            key = json.dumps({k: e.get(k) for k in ("manager", "operation", "apiVersion")})
            by_manager.setdefault(key, [_print_manager(e)]).append(f"- {cause['field']}")
        lines = [line for key in sorted(by_manager) for line in
                 [f"conflicts with {by_manager[key][0]}:", *by_manager[key][1:]]]
        msg = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
    return ApiError(409, "Conflict", msg, {"causes": causes})


def apply(live: dict, config: dict, manager: str, force: bool, api_version: str,
          now: str) -> dict:
    """Return the object after ``manager`` applies ``config``; raises 409 on conflicts."""
    entries = copy.deepcopy(live.get("metadata", {}).get("managedFields") or [])
    mine = next((e for e in entries if e.get("manager") == manager
                 and e.get("operation") == "Apply"), None)
    others = [e for e in entries if e is not mine]
    wanted = field_set(config)
    conflicts = []
    for e in others:
        owned = from_fields_v1(e.get("fieldsV1"))
        conflicts += [(e, p) for p in sorted(wanted & owned) if _differs(live, config, p)]
    if conflicts and not force:
        raise _conflict_error(conflicts)
    others_sets = []
    for e in others:
        owned = from_fields_v1(e.get("fieldsV1"))
        if force:
            owned -= {p for ce, p in conflicts if ce is e}
        others_sets.append((e, owned))
    kept_by_others = set().union(*(s for _, s in others_sets)) if others_sets else set()
    obj = copy.deepcopy(live)
    before = from_fields_v1(mine.get("fieldsV1")) if mine else set()
    for p in sorted(before - wanted, key=len, reverse=True):
        if p in kept_by_others:
            continue
        if p[-1] == "." and any(q[:len(p) - 1] == p[:-1] for q in kept_by_others):
            continue
        _remove_at(obj, p)
        _prune_empty_parents(obj, p, kept_by_others)
    obj = merge(obj, config)
    obj["metadata"]["managedFields"] = _managed(others_sets, mine, manager, "Apply",
                                                api_version, now, wanted)
    return obj


def _managed(others_sets, mine, manager, operation, api_version, now, paths) -> list[dict]:
    out = []
    for e, owned in others_sets:
        if owned:
            e = dict(e)
            if from_fields_v1(e.get("fieldsV1")) != owned:
                e["fieldsV1"] = to_fields_v1(owned)
            out.append(e)
    if paths:
        unchanged = mine is not None and from_fields_v1(mine.get("fieldsV1")) == paths
        out.append(_entry(manager, operation, api_version,
                          mine["time"] if unchanged else now, paths))
    return out


def track_update(old: dict | None, new: dict, manager: str, api_version: str, now: str) -> None:
    """Record on ``new`` that ``manager`` (a create/update/patch) set what it changed."""
    entries = copy.deepcopy((old or {}).get("metadata", {}).get("managedFields") or [])
    old_f = field_set(old) if old else set()
    new_f = field_set(new)
    changed = {p for p in new_f if p not in old_f or _differs(old, new, p)}
    removed = old_f - new_f
    mine = next((e for e in entries if e.get("manager") == manager
                 and e.get("operation") == "Update"), None)
    others_sets = [(e, from_fields_v1(e.get("fieldsV1")) - changed - removed)
                   for e in entries if e is not mine]
    paths = ((from_fields_v1(mine.get("fieldsV1")) if mine else set()) | changed) - removed
    new["metadata"]["managedFields"] = _managed(others_sets, mine, manager, "Update",
                                                api_version, now, paths)
