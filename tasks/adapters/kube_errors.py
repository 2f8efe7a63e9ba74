"""The one place Kubernetes API errors become pdlift errors, for every adapter that talks to the API.

The same HTTP status means the same thing whichever adapter saw it (``KubeApply``,
``KubeNodes``, ``ServiceRouting``), following the API's own status codes
(docs/sources.md#kube-status-codes):

    401, 403   RequestRejected  our credentials are refused: an EKS access entry is missing
    404        ResourceGone     the object does not exist (callers that read or delete decide)
               StageFailed      ... unless the API does not serve the kind at all (a CRD is missing)
    409        StageFailed      a conflict (an object being deleted, a stale resourceVersion)
    429        ApiThrottled     the API server's priority and fairness asked us to slow down
    5xx        RemoteUnavailable
    other 4xx  RequestRejected  the API refused the request (invalid object, bad field)
    no answer  RemoteUnavailable (refused, reset, timed out)
"""

from __future__ import annotations

import json

from kubernetes.client.exceptions import ApiException

from tasks.errors import ApiThrottled, PdliftError, RemoteUnavailable, RequestRejected, ResourceGone, StageFailed

NOT_SERVED = "the server could not find the requested resource"  # a 404 for the kind, not the object
# An API group nobody serves (no CRD installed) never reaches a REST handler: the apiserver's
# non-go-restful mux answers with Go's http.NotFound, plain text, not a Status (seen from a real
# kube-apiserver v1.20.2 by scripts/bench/kube_contract.py).
PAGE_NOT_FOUND = "404 page not found"


class HttpStatus(Exception):
    """A non-2xx answer read off a raw response: its status and the Status document's reason and message."""

    def __init__(self, status: int, body: bytes | str | None, reason: str = ""):
        self.status = status
        raw = body.encode() if isinstance(body, str) else (body or b"")
        try:
            doc = json.loads(raw or b"{}")
        except ValueError:
            doc = {}
        doc = doc if isinstance(doc, dict) else {}
        self.reason = str(doc.get("reason") or reason or "")
        self.message = str(doc.get("message") or raw[:300].decode(errors="replace") or reason)
        super().__init__(f"{status} {self.reason}: {self.message}")


def translate(e: BaseException, what: str) -> PdliftError:
    """``e`` (ApiException, HttpStatus, or a transport error) as the project's error about ``what``."""
    if isinstance(e, ApiException):
        e = HttpStatus(e.status or 0, e.body, e.reason or "")
    if not isinstance(e, HttpStatus):
        return RemoteUnavailable(f"{what}: cannot reach the Kubernetes API ({type(e).__name__}: {e})")
    status, reason, message = e.status, e.reason, e.message
    if status in (401, 403):
        return RequestRejected(f"{what}: Kubernetes refused our credentials ({status} {message}); give the "
                               "pdlift role an EKS access entry with rights on the cluster's nodes and the "
                               "deployment's namespaces (docs/aws.md)", code=reason or str(status))
    if status == 404 and (NOT_SERVED in message or message.strip() == PAGE_NOT_FOUND):
        return StageFailed(f"{what}: the cluster does not serve this kind; is its CRD (e.g. the "
                           "LeaderWorkerSet controller) installed?")
    if status == 404:
        return ResourceGone(f"{what}: not found ({message})")
    if status == 409:
        return StageFailed(f"{what}: conflict: {message}")
    if status == 429:
        return ApiThrottled(f"{what}: Kubernetes API throttled us ({message})")
    if status >= 500:
        return RemoteUnavailable(f"{what}: Kubernetes API answered {status} {reason}: {message}")
    return RequestRejected(f"{what}: rejected ({status} {reason}): {message}", code=reason or str(status))
