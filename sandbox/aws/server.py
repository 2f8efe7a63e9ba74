"""The sandbox AWS endpoint: one loopback HTTP server in front of moto.

Every AWS request is routed by the service name in its SigV4 credential scope (the
``Authorization`` header, or ``X-Amz-Credential`` in a presigned URL). EC2 calls moto lacks
are answered here (ec2.py); EKS clusters, the EKS AMI SSM parameters and EC2 vCPU quotas are
answered or patched (json_services.py); everything else goes to moto untouched.

Admin routes under ``/__sandbox/``:

    GET    /__sandbox/health                 200 once ready
    GET    /__sandbox/requests[?action=&service=]   every request received, in order
    DELETE /__sandbox/requests
    GET|POST|DELETE /__sandbox/faults        list / add one (JSON, see faults.py) / clear
    POST   /__sandbox/reset                  forget everything (moto too), stop every node
"""

from __future__ import annotations

import itertools
import json
import logging
import re
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any
from urllib.parse import quote

from werkzeug.wrappers import Request, Response

from sandbox.aws import json_services, query, rest_actions
from sandbox.aws.config import AwsConfig
from sandbox.aws.ec2 import Ec2Service
from sandbox.aws.faults import FaultBook
from sandbox.aws.nodes import NodeManagerLike, stop_all
from sandbox.aws.proxy import Moto
from sandbox.aws.quotas import DEFAULT_QUOTAS
from sandbox.aws.render import Ec2Error, error_xml

log = logging.getLogger(__name__)
SCOPE = re.compile(r"Credential=[^/\s,]+/\d{8}/([^/\s,]+)/([^/\s,]+)/aws4_request")
MAX_LOGGED = 5000


def credential_scope(request: Request) -> tuple[str | None, str | None]:
    """(service, region) from the SigV4 credential scope, or (None, None) when unsigned."""
    auth = request.headers.get("Authorization", "")
    found = SCOPE.search(auth)
    if not found and request.args.get("X-Amz-Credential"):
        found = SCOPE.search("Credential=" + request.args["X-Amz-Credential"])
    return (found.group(2), found.group(1)) if found else (None, None)


class AwsFront:
    """The WSGI application. ``state_dir`` is ``$PDLIFT_STATE_DIR``."""

    def __init__(self, state_dir: Path, config: AwsConfig, moto: Moto,
                 nodes: NodeManagerLike | None) -> None:
        self._state_dir = Path(state_dir)
        self._config = config
        self._moto = moto
        self._nodes = nodes
        self.faults = FaultBook()
        self.ec2 = Ec2Service(config, moto, self.faults, nodes)
        self._requests: deque[dict[str, Any]] = deque(maxlen=MAX_LOGGED)
        self._seq = itertools.count(1)
        self._reset_lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        request = Request(environ)
        if request.path.startswith("/__sandbox/"):
            response = self._admin(request)
        else:
            response = self._aws(request, environ)
        return response(environ, start_response)

    # ---- AWS traffic --------------------------------------------------------------------
    def _aws(self, request: Request, environ: dict[str, Any]) -> Response:
        body = request.get_data(cache=False)
        headers = {k: v for k, v in request.headers.items()}
        service, region = credential_scope(request)
        entry: dict[str, Any] = {"seq": next(self._seq), "time": time.time(),
                                 "service": service, "region": region,
                                 "method": request.method, "path": request.path}
        self._requests.append(entry)
        target = environ.get("RAW_URI") or environ.get("REQUEST_URI") or (
            quote(request.path) + ("?" + request.query_string.decode()
                                   if request.query_string else ""))
        form = query.parse_form(body, request.query_string.decode()) if _is_form(request) \
            else {}
        target_header = headers.get("X-Amz-Target", "")
        entry["action"] = (form.get("Action") or target_header.rsplit(".", 1)[-1]
                           or rest_actions.action_for(service or "", request.method, request.path))
        if service == "ec2":
            action = form.get("Action", "")
            if action in query.operation_names():
                original = (request.method, target, body)
                return self._ec2(region or self._config.region, action, form, headers, entry,
                                 original)
        if service in ("ssm", "servicequotas"):
            quotas = {**DEFAULT_QUOTAS, **self._config.vcpu_quotas}
            answered = json_services.answer(service, region or self._config.region,
                                            self._config.account_id, quotas,
                                            target_header, body)
            if answered is not None:
                entry["status"] = 200
                return Response(answered, status=200,
                                 content_type="application/x-amz-json-1.1")
        status, resp_headers, data = self._moto.forward(request.method, target, headers, body)
        if service == "eks" and status == 200:
            data = json_services.patch_eks(self._state_dir, request.path, data)
        entry["status"] = status
        return Response(data, status=status, headers=resp_headers)

    def _ec2(self, region: str, action: str, form: dict[str, str], headers: dict[str, str],
             entry: dict[str, Any], original: tuple[str, str, bytes]) -> Response:
        entry["action"] = action
        try:
            params = query.parse_params(action, form)
            entry["params"] = params
            answered = self.ec2.handle(region, action, params, form, headers, entry)
            if answered is None:
                method, target, body = original
                status, _, data = self._moto.forward(method, target, headers, body)
            else:
                status, data = answered
        except Ec2Error as e:
            status, data = e.status, error_xml(e)
            entry["error"] = e.code
        except ValueError as e:  # a parameter that does not parse as its declared type
            err = Ec2Error("InvalidParameterValue", str(e))
            status, data = err.status, error_xml(err)
            entry["error"] = err.code
        except Exception:
            log.exception("EC2 %s failed inside the sandbox", action)
            err = Ec2Error("InternalError", "The sandbox failed on this request; see its log.")
            status, data = err.status, error_xml(err)
            entry["error"] = err.code
        entry["status"] = status
        return Response(data, status=status, content_type="text/xml;charset=UTF-8")

    # ---- admin routes -------------------------------------------------------------------
    def _admin(self, request: Request) -> Response:
        route = (request.method, request.path.rstrip("/"))
        if route == ("GET", "/__sandbox/health"):
            return _json({"status": "ok", "moto": self._moto.url})
        if route == ("GET", "/__sandbox/requests"):
            wanted = {k: v for k, v in request.args.items() if k in ("action", "service")}
            found = [e for e in list(self._requests)
                     if all(e.get(k) == v for k, v in wanted.items())]
            return _json(found)
        if route == ("DELETE", "/__sandbox/requests"):
            self._requests.clear()
            return _json({"cleared": True})
        if route == ("GET", "/__sandbox/faults"):
            return _json(self.faults.listing())
        if route == ("POST", "/__sandbox/faults"):
            try:
                fault = self.faults.add(json.loads(request.get_data() or b"{}"))
            except (ValueError, TypeError) as e:
                return _json({"error": str(e)}, 400)
            return _json({"id": fault.id}, 201)
        if route == ("DELETE", "/__sandbox/faults"):
            self.faults.clear()
            return _json({"cleared": True})
        if route == ("POST", "/__sandbox/reset"):
            self.reset()
            return _json({"reset": True})
        return _json({"error": f"no route {request.method} {request.path}"}, 404)

    def reset(self) -> None:
        with self._reset_lock:
            self.ec2.shutdown()
            self._moto.reset()
            self.faults.clear()
            self._requests.clear()
            self.ec2 = Ec2Service(self._config, self._moto, self.faults, self._nodes)

    def shutdown(self) -> None:
        self.ec2.shutdown()
        stop_all(self._nodes)


def _is_form(request: Request) -> bool:
    """A Query-protocol request (EC2, STS, IAM): form-encoded body or Action in the URL."""
    return request.mimetype == "application/x-www-form-urlencoded" or "Action" in request.args


def _json(value: Any, status: int = 200) -> Response:
    return Response(json.dumps(value, default=_default), status=status,
                    content_type="application/json")


def _default(value: Any) -> Any:
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, (set, tuple)):
        return list(value)
    return str(value)
