"""API errors as the real API server reports them: a ``Status`` object with code and reason."""

from __future__ import annotations


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: dict | None = None,
                 plain: str | None = None):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details
        self.plain = plain  # sent as text/plain instead of a Status (Go's http.NotFound)

    def status(self) -> dict:
        body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": self.message, "reason": self.reason, "code": self.code}
        if self.details:
            body["details"] = self.details
        return body


def _details(rt, name: str) -> dict:
    d = {"name": name, "kind": rt.plural}
    if rt.group:
        d["group"] = rt.group
    return d


def not_found(rt, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{rt.qualified} "{name}" not found', _details(rt, name))


def namespace_not_found(ns: str) -> ApiError:
    return ApiError(404, "NotFound", f'namespaces "{ns}" not found',
                    {"name": ns, "kind": "namespaces"})


def already_exists(rt, name: str) -> ApiError:
    return ApiError(409, "AlreadyExists", f'{rt.qualified} "{name}" already exists',
                    _details(rt, name))


def stale(rt, name: str) -> ApiError:
    return ApiError(409, "Conflict",
                    f'Operation cannot be fulfilled on {rt.qualified} "{name}": the object has '
                    "been modified; please apply your changes to the latest version and try again",
                    _details(rt, name))


def invalid(rt, name: str, causes: list[dict]) -> ApiError:
    listed = ", ".join(f"{c['field']}: {c['message']}" for c in causes)
    if len(causes) > 1:
        listed = f"[{listed}]"
    return ApiError(422, "Invalid", f'{rt.kind} "{name}" is invalid: {listed}',
                    {**_details(rt, name), "kind": rt.kind, "causes": causes})


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


def method_not_allowed(message: str = "the server does not allow this method on the requested resource") -> ApiError:
    return ApiError(405, "MethodNotAllowed", message)


def unsupported_media_type(content_type: str) -> ApiError:
    return ApiError(415, "UnsupportedMediaType",
                    f"the body of the request was in an unknown format - accepted media types "
                    f"include: application/json-patch+json, application/merge-patch+json, "
                    f"application/apply-patch+yaml (got {content_type!r})")


def expired(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def path_not_found() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource")


def group_not_served() -> ApiError:
    """A path under ``/apis/<group>`` that no built-in group serves (a CRD's group that is not
    installed, or a version of it that is not served): the request falls through the
    apiextensions-apiserver's CRD handler to Go's ``http.NotFound``, a plain-text
    ``404 page not found`` with no Status (apiextensions-apiserver pkg/apiserver/apiserver.go,
    ``delegateHandler = http.NotFoundHandler()``; newer servers end in
    apiserver/pkg/util/notfoundhandler, also ``http.NotFound``). Checked against a real v1.20.2
    server by scripts/bench/kube_contract.py. An unknown resource of a served group/version is a
    NotFound Status instead (``path_not_found``)."""
    return ApiError(404, "NotFound", "404 page not found", plain="404 page not found\n")
