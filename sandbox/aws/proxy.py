"""moto, in this process on its own loopback port, and the plumbing to talk to it.

Requests the front does not answer itself are forwarded byte for byte (method, path, query,
headers, body), so moto sees exactly what the SDK sent and routes it by the SigV4 credential
scope as it would without the front. The front also asks moto things on its own account
(a subnet's AZ, a launch template's data) through ordinary boto3 clients.
"""

from __future__ import annotations

import functools
import http.client
import json
import logging
import urllib.request
from typing import Any

import boto3
from botocore.config import Config

# Hop-by-hop headers (RFC 9110 7.6.1) and lengths the front recomputes.
_DROP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer",
         "upgrade", "content-length"}


class Moto:
    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        from moto.server import ThreadedMotoServer  # heavy import, only when a front starts

        # The werkzeug request log would print one line per API call on stderr.
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        self._server = ThreadedMotoServer(ip_address=host, port=port, verbose=False)
        self._server.start()
        self.host, self.port = self._server.get_host_and_port()
        self.url = f"http://{self.host}:{self.port}"

    def stop(self) -> None:
        self._server.stop()

    def reset(self) -> None:
        """Forget every resource moto holds (its ``/moto-api/reset``)."""
        req = urllib.request.Request(self.url + "/moto-api/reset", data=b"", method="POST")
        # 60 s, as forward's: on a test worker at the lowest priority of scripts/test a reset once
        # waited more than 10 s for the CPU, and the front (werkzeug) answers a timeout here by
        # dropping its own client's connection without a response.
        with urllib.request.urlopen(req, timeout=60) as resp:
            resp.read()

    def forward(self, method: str, target: str, headers: dict[str, str],
                body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        try:
            sent = {k: v for k, v in headers.items() if k.lower() not in _DROP}
            sent["Content-Length"] = str(len(body))
            conn.request(method, target, body=body, headers=sent)
            resp = conn.getresponse()
            data = resp.read()
            kept = [(k, v) for k, v in resp.getheaders() if k.lower() not in _DROP]
            return resp.status, kept, data
        finally:
            conn.close()

    @functools.lru_cache(maxsize=32)  # noqa: B019 (one Moto per front; clients are reused)
    def client(self, service: str, region: str) -> Any:
        return boto3.session.Session().client(
            service,
            region_name=region,
            endpoint_url=self.url,
            aws_access_key_id="sandbox",
            aws_secret_access_key="sandbox",
            config=Config(retries={"total_max_attempts": 1}),
        )


def json_body(data: bytes) -> Any:
    try:
        return json.loads(data or b"null")
    except ValueError:
        return None
