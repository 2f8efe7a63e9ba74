"""The Kubernetes stand-in as one object: store + API + auth + runtime + HTTPS server."""

from __future__ import annotations

import os
import ssl
import threading
import time
from pathlib import Path

from sandbox.kube import errors, resources
from sandbox.kube.api import Api
from sandbox.kube.auth import TokenVerifier
from sandbox.kube.config import Settings, write_client_files
from sandbox.kube.events import EventRecorder
from sandbox.kube.faults import Faults
from sandbox.kube.http import KubeHTTPServer
from sandbox.kube.podstatus import log_container, read_tail
from sandbox.kube.runtime import Runtime
from sandbox.kube.store import Store
from sandbox.kube.tls import ensure_certs

PODS = resources.lookup("", "v1", "pods")
MAX_FOLLOW_SECONDS = 600


class KubeApp:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.api = Api(Store())
        if settings.gpu_operator:
            for plural, body in resources.gpu_operator_objects():
                rt = resources.lookup("apps" if plural == "daemonsets" else "", "v1", plural)
                self.api.create(rt, body["metadata"].get("namespace"), body, "helm")
        self.recorder = EventRecorder(self.api)
        self.faults = Faults()
        self.verifier = TokenVerifier(settings.cluster_name, settings.credentials,
                                      settings.resolve_sts_endpoint)
        self.runtime = Runtime(self)
        self.httpd: KubeHTTPServer | None = None
        self.port = settings.port

    def start(self) -> None:
        s = self.settings
        s.kube_dir.mkdir(parents=True, exist_ok=True)
        ca, cert, key = ensure_certs(s.kube_dir, s.host)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        ctx.set_alpn_protocols(["http/1.1"])
        self.httpd = KubeHTTPServer((s.host, s.port), self, ctx)
        self.port = self.httpd.server_address[1]
        server = f"https://{s.host}:{self.port}"
        write_client_files(s, server, ca)
        (s.kube_dir / "server.pid").write_text(f"{os.getpid()}\n")
        self.runtime.start()

    def serve_forever(self) -> None:
        self.httpd.serve_forever(poll_interval=0.2)

    def serve_in_thread(self) -> threading.Thread:
        t = threading.Thread(target=self.serve_forever, name="kube-http", daemon=True)
        t.start()
        return t

    def stop(self) -> None:
        self.api.store.close()
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()
        self.runtime.stop()

    # --- admin routes (not Kubernetes API) -----------------------------------------------

    def admin(self, method: str, path: str, body: dict, query: dict) -> tuple[int, dict]:
        route = path[len("/__sandbox/"):]
        if route == "health" and method == "GET":
            return 200, {"ok": True, "resourceVersion": self.api.store.resource_version}
        if route == "faults":
            if method == "GET":
                return 200, {"faults": self.faults.list()}
            if method == "POST":
                if not isinstance(body, dict):
                    raise errors.bad_request("a fault is a JSON object")
                return 201, self.faults.add(body)
            if method == "DELETE":
                fid = (query.get("id") or [None])[0]
                kind = (query.get("fault") or [None])[0] or (body or {}).get("fault")
                removed = self.faults.clear(kind, int(fid) if fid else None,
                                            (body or {}).get("node"))
                return 200, {"removed": removed}
        if route == "config" and method == "PUT":
            if "allowed_images" in (body or {}):
                self.settings.allowed_images = list(body["allowed_images"])
            return 200, {"allowed_images": self.settings.allowed_images}
        raise errors.path_not_found()

    # --- pod logs ------------------------------------------------------------------------

    def stream_log(self, handler, ns: str, name: str, query: dict) -> None:
        def q(k, default=None):
            return (query.get(k) or [default])[0]

        pod = self.api.get(PODS, ns, name)
        if not (pod.get("spec") or {}).get("nodeName"):
            # Not bound to a node: no kubelet to ask. The API server checks the container name,
            # then answers 204 No Content with no body (pkg/registry/core/pod/strategy.go
            # LogLocation: "If pod has not been assigned a host, return an empty location";
            # apiserver responsewriters.StreamObject: no stream -> http.StatusNoContent).
            # Checked against a real v1.20.2 server by scripts/bench/kube_contract.py.
            log_container(pod, q("container"))
            handler.send_response(204)
            handler.send_header("Cache-Control", "no-cache, private")
            handler.end_headers()
            return
        path: Path = self.runtime.kubelet.log_file(pod, q("container"), q("previous") == "true")
        tail = int(q("tailLines")) if q("tailLines") else None
        limit = int(q("limitBytes")) if q("limitBytes") else None
        data = read_tail(path, tail, limit)
        if q("follow") != "true":
            return handler._send(200, data, "text/plain")
        handler.send_response(200)
        handler.send_header("Content-Type", "text/plain")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        if data:
            handler._chunk(data)
        offset = path.stat().st_size if path.exists() else 0
        deadline = time.monotonic() + MAX_FOLLOW_SECONDS
        uid = pod["metadata"]["uid"]
        # Follow until the pod is gone or the attempt's log stops growing after it exits.
        while time.monotonic() < deadline and not self.api.store.closed:
            current = self.api.store.get(PODS, ns, name)
            if current is None or current["metadata"]["uid"] != uid:
                break
            with open(path, "rb") as f:
                f.seek(offset)
                more = f.read()
            if more:
                offset += len(more)
                handler._chunk(more)
            elif not self._attempt_running(uid, path):
                break
            time.sleep(0.2)
        handler.wfile.write(b"0\r\n\r\n")
        handler.wfile.flush()

    def _attempt_running(self, uid: str, path: Path) -> bool:
        prt = self.runtime.kubelet.pods.get(uid)
        for c in prt.ctrs if prt else []:
            if c.proc is not None and c.attempts and c.log_path(c.attempts - 1) == path:
                return True
        return False
