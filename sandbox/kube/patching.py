"""JSON merge patch (RFC 7386), JSON patch (RFC 6902) and strategic merge patch.

Strategic merge patch knows the merge keys of the lists pdlift writes (containers, env,
ports, volumes, ...); other lists are replaced, as for types without patch metadata.
"""

from __future__ import annotations

import copy

from sandbox.kube.errors import bad_request

# field name -> merge key, for lists of objects merged item by item (SMP and SSA).
MERGE_KEYS = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name",
    "env": "name", "volumes": "name", "volumeMounts": "mountPath",
    "imagePullSecrets": "name", "hostAliases": "ip", "conditions": "type",
    "ownerReferences": "uid", "volumeDevices": "devicePath",
}


def merge_key(field: str, items: list) -> str | None:
    """The key that identifies items of list ``field``, or None if the list is atomic."""
    if not items or not all(isinstance(i, dict) for i in items):
        return None
    if field == "ports":
        key = "containerPort" if all("containerPort" in i for i in items) else "port"
    else:
        key = MERGE_KEYS.get(field)
    if key and all(key in i for i in items):
        return key
    return None


def json_merge_patch(target, patch):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            result.pop(k, None)
        else:
            result[k] = json_merge_patch(result.get(k), v)
    return result


def _smp_list(field: str, target: list, patch: list, order: list | None) -> list:
    key = merge_key(field, [p for p in patch if isinstance(p, dict) and "$patch" not in p]
                    or [p for p in patch if isinstance(p, dict)])
    if key is None or not all(isinstance(i, dict) for i in target):
        return [p for p in copy.deepcopy(patch) if not (isinstance(p, dict) and "$patch" in p)]
    if any(isinstance(p, dict) and p.get("$patch") == "replace" for p in patch):
        return [p for p in copy.deepcopy(patch) if "$patch" not in p]
    result = copy.deepcopy(target)
    for item in patch:
        match = next((i for i in result if i.get(key) == item.get(key)), None)
        if item.get("$patch") == "delete":
            result = [i for i in result if i.get(key) != item.get(key)]
        elif match is not None:
            result[result.index(match)] = strategic_merge_patch(match, item)
        else:
            result.append(strategic_merge_patch({}, item))
    if order:  # $setElementOrder: the client's wanted order of merge keys.
        rank = {o.get(key): i for i, o in enumerate(order) if isinstance(o, dict)}
        result.sort(key=lambda i: rank.get(i.get(key), len(rank)))
    return result


def strategic_merge_patch(target, patch):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    if patch.get("$retainKeys"):  # union fields: drop the members the patch does not keep
        keep = set(patch["$retainKeys"])
        result = {k: v for k, v in result.items() if k in keep}
    for k, v in patch.items():
        if k.startswith("$setElementOrder/") or k in ("$patch", "$retainKeys"):
            continue
        if k.startswith("$deleteFromPrimitiveList/"):
            field = k.split("/", 1)[1]
            result[field] = [x for x in result.get(field) or [] if x not in (v or [])]
            continue
        if v is None:
            result.pop(k, None)
        elif isinstance(v, dict):
            merged = strategic_merge_patch(result.get(k), v)
            if merged is None:
                result.pop(k, None)
            else:
                result[k] = merged
        elif isinstance(v, list):
            current = result.get(k)
            order = patch.get(f"$setElementOrder/{k}")
            result[k] = _smp_list(k, current if isinstance(current, list) else [], v, order)
        else:
            result[k] = v
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc, parts: list[str]):
    node = doc
    for p in parts:
        if isinstance(node, list):
            node = node[int(p)]
        elif isinstance(node, dict):
            node = node[p]
        else:
            raise KeyError(p)
    return node


def json_patch(target, ops: list):
    doc = copy.deepcopy(target)
    if not isinstance(ops, list):
        raise bad_request("a JSON patch must be a list of operations")
    for op in ops:
        try:
            kind, parts = op["op"], _pointer(op["path"])
            if kind == "test":
                if _walk(doc, parts) != op.get("value"):
                    raise bad_request(f"test operation failed at {op['path']}")
                continue
            if kind in ("move", "copy"):
                value = copy.deepcopy(_walk(doc, _pointer(op["from"])))
                if kind == "move":
                    doc = json_patch(doc, [{"op": "remove", "path": op["from"]}])
                kind, op = "add", {"value": value}
            else:
                value = op.get("value")
            parent, last = _walk(doc, parts[:-1]), parts[-1]
            if kind == "remove":
                del parent[int(last) if isinstance(parent, list) else last]
            elif kind in ("add", "replace"):
                if isinstance(parent, list):
                    idx = len(parent) if last == "-" else int(last)
                    if kind == "add":
                        parent.insert(idx, copy.deepcopy(value))
                    else:
                        parent[idx] = copy.deepcopy(value)
                else:
                    if kind == "replace" and last not in parent:
                        raise KeyError(last)
                    parent[last] = copy.deepcopy(value)
            else:
                raise bad_request(f"unknown JSON patch operation {kind!r}")
        except (KeyError, IndexError, ValueError, TypeError) as e:
            raise bad_request(f"the JSON patch could not be applied: {op!r}: {e}") from e
    return doc
