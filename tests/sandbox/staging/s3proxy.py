"""A loopback HTTP proxy in front of the sandbox S3 that misbehaves on request.

It forwards requests unchanged (the Host header too, so SigV4 signatures still verify) and can:
answer ``503 SlowDown`` for a while, throttle response bodies, hold every ranged GET after the
first N until stopped (a download that cannot finish, to kill it at a known point), and flip a
byte of one object in ranged responses (corruption S3 would serve under the same ETag). It
counts what it saw, and records each request's method and path (with its query), as S3's server
access log would, for tests that hold the IAM policy to the requests a run made.
"""

from __future__ import annotations

import http.client
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SLOWDOWN = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
            b"<Message>Please reduce your request rate.</Message></Error>")
CHUNK = 64 << 10


class S3Proxy:
    def __init__(self, upstream: str, host: str = "127.0.0.1"):
        self.upstream = urllib.parse.urlsplit(upstream)
        self.slowdown_until = 0.0
        self.slowdown_for_s: float | None = None  # a SlowDown window that opens at the next request
        self.rate_bps: float | None = None
        self.stall_after_gets: int | None = None  # ranged GETs beyond this many wait for stop()
        self._released = threading.Event()
        self.corrupt_key: str | None = None  # object key whose byte at corrupt_offset is flipped
        self.corrupt_offset = 1 << 20
        self.lock = threading.Lock()
        self.counts = {"requests": 0, "ranged_gets": 0, "slowdowns": 0, "body_bytes": 0}
        self.seen: list[tuple[str, str, bool]] = []  # (method, path?query, ranged), in arrival order
        self._server = ThreadingHTTPServer((host, 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                        daemon=True)

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "S3Proxy":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._released.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def count(self, name: str, n: int = 1) -> None:
        with self.lock:
            self.counts[name] += n

    def _handler(self):
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _forward(self):
                proxy.count("requests")
                with proxy.lock:
                    proxy.seen.append((self.command, self.path, "Range" in self.headers))
                ranged = self.command == "GET" and "Range" in self.headers
                if ranged:
                    proxy.count("ranged_gets")
                    if proxy.stall_after_gets is not None and proxy.counts["ranged_gets"] > proxy.stall_after_gets:
                        proxy._released.wait(60)
                with proxy.lock:
                    if proxy.slowdown_for_s is not None:
                        proxy.slowdown_until, proxy.slowdown_for_s = time.monotonic() + proxy.slowdown_for_s, None
                if time.monotonic() < proxy.slowdown_until:
                    proxy.count("slowdowns")
                    return self._reply(503, SLOWDOWN, {"Content-Type": "application/xml"})
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                up = http.client.HTTPConnection(proxy.upstream.hostname, proxy.upstream.port, timeout=60)
                try:
                    up.request(self.command, self.path, body=body, headers=dict(self.headers.items()))
                    resp = up.getresponse()
                    self.send_response(resp.status)
                    for k, v in resp.getheaders():
                        if k.lower() not in ("connection", "transfer-encoding", "keep-alive"):
                            self.send_header(k, v)
                    data = resp.read()
                    start = _range_start(self.headers.get("Range"))
                    key = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path).split("/", 2)[-1]
                    if ranged and key == proxy.corrupt_key and start <= proxy.corrupt_offset < start + len(data):
                        i = proxy.corrupt_offset - start
                        data = data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:]
                    if "Content-Length" not in resp.headers:
                        self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self._send_body(data)
                finally:
                    up.close()

            def _send_body(self, data: bytes):
                for i in range(0, len(data), CHUNK):
                    piece = data[i:i + CHUNK]
                    self.wfile.write(piece)
                    proxy.count("body_bytes", len(piece))
                    if proxy.rate_bps:
                        time.sleep(len(piece) / proxy.rate_bps)

            def _reply(self, status, body, headers):
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward

        return Handler


def _range_start(value: str | None) -> int:
    if not value or not value.startswith("bytes="):
        return 0
    return int(value[6:].split("-")[0] or 0)
