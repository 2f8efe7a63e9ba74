"""Name the operation of a REST-protocol request (EKS and friends) from botocore's service model,
so the request log says `eks:DescribeCluster` rather than nothing."""

from __future__ import annotations

import functools
import re

import botocore.session


@functools.lru_cache(maxsize=16)
def _routes(service: str) -> list[tuple[str, re.Pattern, str]]:
    try:
        model = botocore.session.get_session().get_service_model(service)
    except Exception:  # noqa: BLE001 - an unknown service simply has no names
        return []
    routes = []
    for name in model.operation_names:
        http = model.operation_model(name).http
        uri = http.get("requestUri", "/").split("?", 1)[0]
        pattern = re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(uri).replace(r"\+", ""))
        routes.append((http.get("method", "GET"), re.compile(f"^{pattern}$"), name))
    # Longer literal URIs first, so /clusters/{name}/addons beats /clusters/{name}.
    return sorted(routes, key=lambda r: -len(r[1].pattern))


def action_for(service: str, method: str, path: str) -> str | None:
    for verb, pattern, name in _routes(service):
        if verb == method and pattern.match(path):
            return name
    return None
