"""Container probes (httpGet, tcpSocket; exec and grpc as noted) against the pod's address."""

from __future__ import annotations

import http.client
import socket


def _port(value, container: dict) -> int | None:
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    for p in container.get("ports") or []:
        if p.get("name") == value:
            return p.get("containerPort")
    return None


def run_probe(probe: dict, container: dict, address: str) -> tuple[bool, str]:
    """Return (success, message). Success for HTTP is a status in [200, 400), as kubelet's."""
    timeout = min(float(probe.get("timeoutSeconds", 1)), 5.0)
    if probe.get("httpGet"):
        get = probe["httpGet"]
        port = _port(get.get("port"), container)
        host = get.get("host") or address
        if port is None:
            return False, f"unknown port {get.get('port')!r}"
        conn_cls = http.client.HTTPSConnection if get.get("scheme") == "HTTPS" else \
            http.client.HTTPConnection
        conn = conn_cls(host, port, timeout=timeout)
        try:
            headers = {h["name"]: h["value"] for h in get.get("httpHeaders") or []}
            conn.request("GET", get.get("path") or "/", headers=headers)
            status = conn.getresponse().status
        except (OSError, http.client.HTTPException) as e:
            return False, f'Get "http://{host}:{port}{get.get("path") or "/"}": {e}'
        finally:
            conn.close()
        if 200 <= status < 400:
            return True, ""
        return False, f"HTTP probe failed with statuscode: {status}"
    if probe.get("tcpSocket") or probe.get("grpc"):
        spec = probe.get("tcpSocket") or probe.get("grpc")
        port = _port(spec.get("port"), container)
        if port is None:
            return False, f"unknown port {spec.get('port')!r}"
        try:
            with socket.create_connection((spec.get("host") or address, port), timeout=timeout):
                return True, ""
        except OSError as e:
            return False, f"dial tcp {address}:{port}: {e}"
    # exec probes would run inside the container image, which the sandbox does not have.
    return True, ""
