"""The validation the real API server does that pdlift could trip over: names, labels,
required container fields, selectors that must match templates, immutable fields.

Each check returns causes in the real ``Status.details.causes`` form; the caller turns a
non-empty list into a 422 Invalid.
"""

from __future__ import annotations

import re

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
# Types whose names must be DNS labels (they become host names or DNS records).
_LABEL_NAMED = {"Namespace", "Service", "StatefulSet", "LeaderWorkerSet"}


def _required(field: str) -> dict:
    return {"reason": "FieldValueRequired", "message": "Required value", "field": field}


def _bad(field: str, value, why: str) -> dict:
    return {"reason": "FieldValueInvalid", "message": f"Invalid value: {value!r}: {why}",
            "field": field}


def _forbidden(field: str, why: str) -> dict:
    return {"reason": "FieldValueForbidden", "message": f"Forbidden: {why}", "field": field}


def _check_name(kind: str, name) -> list[dict]:
    if not name:
        return [_required("metadata.name")]
    if kind == "Service":
        # Service names are DNS-1035 labels: they start with a letter (pkg/apis/core/validation
        # ValidateServiceName = NameIsDNS1035Label). Checked against a real v1.20.2 server by
        # scripts/bench/kube_contract.py.
        if len(name) > 63 or not _DNS_1035_LABEL.match(name):
            return [_bad("metadata.name", name, "a DNS-1035 label must consist of lower case alphanumeric "
                         "characters or '-', start with an alphabetic character, and end with an "
                         "alphanumeric character")]
    elif kind in _LABEL_NAMED:
        if len(name) > 63 or not _DNS_LABEL.match(name):
            return [_bad("metadata.name", name, "a lowercase RFC 1123 label must consist of "
                         "lower case alphanumeric characters or '-', and must start and end "
                         "with an alphanumeric character")]
    elif len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        return [_bad("metadata.name", name, "a lowercase RFC 1123 subdomain must consist of "
                     "lower case alphanumeric characters, '-' or '.', and must start and end "
                     "with an alphanumeric character")]
    return []


def _check_labels(labels, field: str) -> list[dict]:
    causes = []
    if labels is None:
        return causes
    if not isinstance(labels, dict):
        return [_bad(field, labels, "must be a map of string to string")]
    for k, v in labels.items():
        name = k.rsplit("/", 1)[-1]
        if not _LABEL_NAME.match(name) or len(name) > 63:
            causes.append(_bad(f"{field}", k, "name part must consist of alphanumeric "
                               "characters, '-', '_' or '.'"))
        if not isinstance(v, str) or len(v) > 63 or not _LABEL_VALUE.match(v):
            causes.append(_bad(f"{field}", v, "a valid label must be an empty string or "
                               "consist of alphanumeric characters, '-', '_' or '.'"))
    return causes


def _check_pod_spec(spec, field: str) -> list[dict]:
    if not isinstance(spec, dict):
        return [_required(field)]
    causes = []
    containers = spec.get("containers")
    if not containers:
        return [_required(f"{field}.containers")]
    seen = set()
    for group in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(group) or []):
            where = f"{field}.{group}[{i}]"
            if not isinstance(c, dict):
                causes.append(_bad(where, c, "must be an object"))
                continue
            name = c.get("name")
            if not name:
                causes.append(_required(f"{where}.name"))
            elif not _DNS_LABEL.match(str(name)):
                causes.append(_bad(f"{where}.name", name, "must be a DNS label"))
            elif name in seen:
                causes.append({"reason": "FieldValueDuplicate", "field": f"{where}.name",
                               "message": f"Duplicate value: {name!r}"})
            seen.add(name)
            if not c.get("image"):
                causes.append(_required(f"{where}.image"))
            for j, p in enumerate(c.get("ports") or []):
                port = p.get("containerPort") if isinstance(p, dict) else None
                if not isinstance(port, int) or not 0 < port < 65536:
                    causes.append(_bad(f"{where}.ports[{j}].containerPort", port,
                                       "must be between 1 and 65535, inclusive"))
    return causes


def _selector_matches(selector, labels) -> bool:
    from sandbox.kube.selectors import LabelSelector

    return LabelSelector.from_object(selector).matches(labels or {})


def _check_template_workload(obj: dict) -> list[dict]:
    spec = obj.get("spec") or {}
    causes = []
    selector = spec.get("selector")
    template = spec.get("template") or {}
    if not selector:
        causes.append(_required("spec.selector"))
    labels = (template.get("metadata") or {}).get("labels")
    if selector and not _selector_matches(selector, labels):
        causes.append(_bad("spec.template.metadata.labels", labels,
                           "`selector` does not match template `labels`"))
    causes += _check_labels(labels, "spec.template.metadata.labels")
    causes += _check_pod_spec(template.get("spec"), "spec.template.spec")
    return causes


def _check_lws(obj: dict) -> list[dict]:
    lwt = (obj.get("spec") or {}).get("leaderWorkerTemplate")
    if not isinstance(lwt, dict) or not isinstance(lwt.get("workerTemplate"), dict):
        return [_required("spec.leaderWorkerTemplate.workerTemplate")]
    causes = []
    size = lwt.get("size", 1)
    if not isinstance(size, int) or size < 1:
        causes.append(_bad("spec.leaderWorkerTemplate.size", size, "must be at least 1"))
    causes += _check_pod_spec(lwt["workerTemplate"].get("spec"),
                              "spec.leaderWorkerTemplate.workerTemplate.spec")
    if isinstance(lwt.get("leaderTemplate"), dict):
        causes += _check_pod_spec(lwt["leaderTemplate"].get("spec"),
                                  "spec.leaderWorkerTemplate.leaderTemplate.spec")
    return causes


def validate(rt, obj: dict) -> list[dict]:
    meta = obj.get("metadata") or {}
    causes = _check_name(rt.kind, meta.get("name"))
    causes += _check_labels(meta.get("labels"), "metadata.labels")
    if rt.kind == "Pod":
        causes += _check_pod_spec(obj.get("spec"), "spec")
    elif rt.kind in ("Deployment", "StatefulSet"):
        causes += _check_template_workload(obj)
    elif rt.kind == "LeaderWorkerSet":
        causes += _check_lws(obj)
    elif rt.kind == "Service":
        for i, p in enumerate((obj.get("spec") or {}).get("ports") or []):
            port = p.get("port") if isinstance(p, dict) else None
            if not isinstance(port, int) or not 0 < port < 65536:
                causes.append(_bad(f"spec.ports[{i}].port", port,
                                   "must be between 1 and 65535, inclusive"))
    return causes


def validate_update(rt, old: dict, new: dict) -> list[dict]:
    causes = validate(rt, new)
    if rt.kind == "Pod":
        # Only images (and added tolerations) of a running pod can change.
        def frozen(spec):
            spec = dict(spec or {})
            spec.pop("tolerations", None)
            spec["containers"] = [{k: v for k, v in c.items() if k != "image"}
                                  for c in spec.get("containers") or []]
            return spec
        if frozen(old.get("spec")) != frozen(new.get("spec")):
            causes.append(_forbidden("spec", "pod updates may not change fields other than "
                                     "`spec.containers[*].image`, `spec.tolerations` "
                                     "(only additions to existing tolerations)"))
    elif rt.kind in ("Deployment", "StatefulSet"):
        if (old.get("spec") or {}).get("selector") != (new.get("spec") or {}).get("selector"):
            causes.append(_bad("spec.selector", (new.get("spec") or {}).get("selector"),
                               "field is immutable"))
    return causes
