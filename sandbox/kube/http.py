"""HTTPS front of the Kubernetes stand-in: routing, auth, JSON/Table responses, watch streams.

Paths: discovery (``/api``, ``/apis``, ``/version``, ``/openapi/v2|v3``), resources under
``/api/v1`` and ``/apis/<group>/<version>`` (namespaced and cluster-wide), subresources
``status`` and ``log``, and the sandbox's own admin routes under ``/__sandbox/`` (faults,
health), which need no token: they are not part of the Kubernetes API.
"""

from __future__ import annotations

import json
import socket
import ssl
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from sandbox.kube import errors, openapi, protobuf, resources, tables
from sandbox.kube.auth import TokenRejected
from sandbox.kube.selectors import FieldSelector, LabelSelector

MAX_WATCH_SECONDS = 1800
DEFAULT_WATCH_SECONDS = 600
_PUBLIC = {"/version", "/healthz", "/livez", "/readyz"}


class KubeHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    block_on_close = False

    def __init__(self, address, app, ssl_context: ssl.SSLContext):
        self.app = app  # sandbox.kube.server.KubeApp
        self.ssl_context = ssl_context
        super().__init__(address, Handler)

    def finish_request(self, request, client_address):
        # TLS handshake in the connection's own thread, so one slow client blocks no one.
        request.settimeout(30)
        try:
            tls = self.ssl_context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            return
        tls.settimeout(None)
        super().finish_request(tls, client_address)


def _q(query: dict, name: str, default=None):
    values = query.get(name)
    return values[0] if values else default


def _truthy(v) -> bool:
    return str(v).lower() in ("1", "true", "yes")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: KubeHTTPServer

    def log_message(self, fmt, *args):  # quiet: errors are logged where they happen
        pass

    def do_GET(self):
        self._handle("GET")

    def do_POST(self):
        self._handle("POST")

    def do_PUT(self):
        self._handle("PUT")

    def do_PATCH(self):
        self._handle("PATCH")

    def do_DELETE(self):
        self._handle("DELETE")

    # --- plumbing ------------------------------------------------------------------------

    def _body(self) -> bytes:
        self._body_read = True
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, code: int, body, content_type: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self.wfile.write(data)

    def _json_body(self, raw: bytes):
        if not raw:
            return {}
        if protobuf.is_protobuf(self.headers.get("Content-Type", "")):
            return protobuf.decode(raw)  # kubectl's typed clients (kubectl create ..., kubectl run)
        try:
            return json.loads(raw)
        except ValueError:
            import yaml  # kubectl create sends JSON, but YAML bodies are legal too
            try:
                return yaml.safe_load(raw)
            except yaml.YAMLError as e:
                raise errors.bad_request(f"couldn't decode the request body: {e}") from e

    def _handle(self, method: str) -> None:
        app = self.server.app
        url = urlsplit(self.path)
        path = url.path.rstrip("/") or "/"
        query = parse_qs(url.query, keep_blank_values=True)
        self._body_read = False
        try:
            if path.startswith("/__sandbox/"):
                raw = self._body() if method in ("POST", "PUT", "DELETE") else b""
                code, body = app.admin(method, path, self._json_body(raw) if raw else {}, query)
                return self._send(code, body)
            if path not in _PUBLIC:
                try:
                    app.verifier.verify(self.headers.get("Authorization"))
                except TokenRejected as e:
                    print(f"kube: 401 {method} {path}: {e}", file=sys.stderr, flush=True)
                    raise errors.unauthorized() from e
            self._route(method, path, query)
        except errors.ApiError as e:
            if not self._body_read:
                # Refused before the body was read (an unknown path, a bad token): read it now, or
                # it would be parsed as the next request on this keep-alive connection.
                self._body()
            if e.plain is not None:
                self._send(e.code, e.plain.encode(), "text/plain; charset=utf-8")
            else:
                self._send(e.code, e.status())
        except (BrokenPipeError, ConnectionResetError, socket.timeout):
            pass
        except Exception as e:  # a bug here must not kill the connection thread silently
            import traceback
            traceback.print_exc()
            self._send(500, errors.ApiError(500, "InternalError", f"internal error: {e}").status())

    # --- routing -------------------------------------------------------------------------

    def _route(self, method: str, path: str, query: dict) -> None:
        app = self.server.app
        segs = path.strip("/").split("/")
        if path == "/version":
            return self._send(200, resources.SERVER_VERSION)
        if path in ("/healthz", "/livez", "/readyz"):
            return self._send(200, b"ok", "text/plain")
        if path == "/api":
            return self._send(200, resources.api_versions(f"{app.settings.host}:{app.port}"))
        if path == "/apis":
            return self._send(200, resources.api_group_list())
        if segs[0] == "openapi":
            doc = openapi.document(segs[1:], query)
            if doc is None:
                raise errors.path_not_found()
            return self._send(200, doc)
        if segs[0] == "api" and len(segs) >= 2:
            group, version, rest = "", segs[1], segs[2:]
        elif segs[0] == "apis" and len(segs) >= 2:
            if len(segs) == 2:
                doc = resources.api_group(segs[1])
                if doc is None:
                    raise errors.group_not_served()
                return self._send(200, doc)
            group, version, rest = segs[1], segs[2], segs[3:]
            if resources.api_resource_list(group, version) is None and (
                    group == resources.LWS_GROUP or resources.api_group(group) is None):
                raise errors.group_not_served()  # the CRD handler's fall-through, not a Status
        else:
            raise errors.path_not_found()
        if not rest:
            doc = resources.api_resource_list(group, version)
            if doc is None:
                raise errors.path_not_found()
            return self._send(200, doc)
        ns = None
        if rest[0] == "namespaces" and len(rest) >= 3 and not (len(rest) == 3 and rest[2] == "status"):
            ns, rest = rest[1], rest[2:]
        rt = resources.lookup(group, version, rest[0])
        if rt is None or len(rest) > 3 or (ns is not None and not rt.namespaced):
            raise errors.path_not_found()
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if sub and not (sub == "status" and rt.has_status) and sub not in rt.subresources:
            raise errors.path_not_found()
        verb = {"GET": "get" if name else "list", "POST": "create", "PUT": "update",
                "PATCH": "patch", "DELETE": "delete" if name else "deletecollection"}[method]
        if verb not in rt.verbs or (method == "POST" and name) or \
                (sub == "status" and method not in ("GET", "PUT", "PATCH")) or \
                (sub == "log" and method != "GET"):
            raise errors.method_not_allowed()
        self._resource(method, rt, ns, name, sub, query)

    def _resource(self, method, rt, ns, name, sub, query) -> None:
        app = self.server.app
        api = app.api
        manager = _q(query, "fieldManager") or self._default_manager()
        dry_run = _q(query, "dryRun") == "All"
        accept = self.headers.get("Accept", "")
        if method == "GET" and sub == "log":
            return app.stream_log(self, ns, name, query)
        if method == "GET" and not name:
            if _truthy(_q(query, "watch", "")):
                return self._watch(rt, ns, query, accept)
            items, rv = api.list(rt, ns, _q(query, "labelSelector"), _q(query, "fieldSelector"))
            if tables.wants_table(accept):
                return self._send(200, tables.table(rt.kind, items, str(rv),
                                                    _q(query, "includeObject", "Metadata")))
            return self._send(200, {"kind": rt.list_kind, "apiVersion": rt.api_version,
                                    "metadata": {"resourceVersion": str(rv)}, "items": items})
        if method == "GET":
            obj = api.get(rt, ns, name)
            if tables.wants_table(accept):
                return self._send(200, tables.table(rt.kind, [obj], obj["metadata"]["resourceVersion"],
                                                    _q(query, "includeObject", "Metadata")))
            return self._send(200, obj)
        raw = self._body()
        if method == "POST":
            return self._send(201, api.create(rt, ns, self._json_body(raw), manager, dry_run))
        if method == "PUT":
            return self._send(200, api.replace(rt, ns, name, self._json_body(raw), manager, sub,
                                               dry_run))
        if method == "PATCH":
            obj, created = api.patch(rt, ns, name, raw, self.headers.get("Content-Type", ""),
                                     _q(query, "fieldManager"), _truthy(_q(query, "force", "")),
                                     sub, dry_run)
            return self._send(201 if created else 200, obj)
        options = self._json_body(raw) if raw else {}
        policy = _q(query, "propagationPolicy") or options.get("propagationPolicy") or "Background"
        if name:
            return self._send(200, api.delete(rt, ns, name, policy, options.get("preconditions")))
        items = api.delete_collection(rt, ns, _q(query, "labelSelector"), _q(query, "fieldSelector"))
        return self._send(200, {"kind": rt.list_kind, "apiVersion": rt.api_version,
                                "metadata": {}, "items": items})

    def _default_manager(self) -> str:
        agent = self.headers.get("User-Agent", "") or "unknown"
        return agent.split("/")[0][:128] or "unknown"

    # --- watch ---------------------------------------------------------------------------

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _event(self, etype: str, obj: dict, rt, as_table: bool, first: list) -> None:
        if as_table and etype != "ERROR" and etype != "BOOKMARK":
            t = tables.table(rt.kind, [obj], obj["metadata"].get("resourceVersion"))
            if not first[0]:
                t["columnDefinitions"] = []
            first[0] = False
            obj = t
        self._chunk(json.dumps({"type": etype, "object": obj}).encode() + b"\n")

    def _watch(self, rt, ns, query, accept) -> None:
        store = self.server.app.api.store
        lsel = LabelSelector.parse(_q(query, "labelSelector"))
        fsel = FieldSelector.parse(_q(query, "fieldSelector"))
        timeout = min(int(_q(query, "timeoutSeconds") or DEFAULT_WATCH_SECONDS), MAX_WATCH_SECONDS)
        as_table = tables.wants_table(accept)
        rv_param = _q(query, "resourceVersion") or ""
        initial = _truthy(_q(query, "sendInitialEvents", ""))

        def visible(o):
            if o is None:
                return False
            if ns and o["metadata"].get("namespace") != ns:
                return False
            return lsel.matches(o["metadata"].get("labels")) and fsel.matches(o)

        with store.lock:
            if rv_param and rv_param != "0" and not initial:
                start, existing = int(rv_param), []
                store.events_after(start)  # raises 410 Expired before we answer 200
            else:
                start = store.resource_version
                existing = [o for o in store.list(rt, ns if rt.namespaced else None) if visible(o)]
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        first = [True]
        try:
            for o in existing:
                self._event("ADDED", o, rt, as_table, first)
            if initial:
                self._event("BOOKMARK", {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": {
                    "resourceVersion": str(start),
                    "annotations": {"k8s.io/initial-events-end": "true"}}}, rt, as_table, first)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and not store.closed:
                try:
                    events = store.events_after(start)
                except errors.ApiError as e:
                    self._event("ERROR", e.status(), rt, False, first)
                    break
                for e in events:
                    start = e.rv
                    if e.rkey != rt.key:
                        continue
                    now_vis, was_vis = visible(e.obj), visible(e.old)
                    if e.type == "MODIFIED" and now_vis and not was_vis:
                        self._event("ADDED", e.obj, rt, as_table, first)
                    elif e.type == "MODIFIED" and was_vis and not now_vis:
                        self._event("DELETED", e.obj, rt, as_table, first)
                    elif now_vis:
                        self._event(e.type, e.obj, rt, as_table, first)
                store.wait_for_change(start, min(1.0, max(0.0, deadline - time.monotonic())))
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            self.close_connection = True
