"""Start and stop the AWS endpoint (front + moto) in this process.

``python -m sandbox.aws`` uses this for the long-running service; tests can use
``start_in_thread`` directly (``with start_in_thread(tmp, node_manager=...) as aws:``).
"""

from __future__ import annotations

import ipaddress
import json
import os
import threading
from pathlib import Path
from typing import Any

from werkzeug.serving import make_server

from sandbox.aws.config import AwsConfig
from sandbox.aws.nodes import NodeManagerLike
from sandbox.aws.proxy import Moto
from sandbox.aws.server import AwsFront


def _require_loopback(host: str) -> None:
    if not ipaddress.ip_address(host).is_loopback:
        raise ValueError(f"the sandbox binds loopback addresses only, not {host}")


class AwsEndpoint:
    def __init__(self, state_dir: str | Path, host: str = "127.0.0.1", port: int = 0,
                 config: AwsConfig | None = None, node_manager: NodeManagerLike | None = None,
                 moto_port: int = 0) -> None:
        _require_loopback(host)
        self.state_dir = Path(state_dir)
        self._host, self._port, self._moto_port = host, port, moto_port
        self.config = config or AwsConfig()
        self._nodes = node_manager
        self._moto: Moto | None = None
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.front: AwsFront | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "start() first"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> AwsEndpoint:
        self._moto = Moto(self._host, self._moto_port)
        try:
            self.front = AwsFront(self.state_dir, self.config, self._moto, self._nodes)
            self._server = make_server(self._host, self._port, self.front, threaded=True)
        except BaseException:
            self._moto.stop()
            raise
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="sandbox-aws", daemon=True)
        self._thread.start()
        self._write_endpoint_file()
        return self

    def _write_endpoint_file(self) -> None:
        folder = self.state_dir / "sandbox" / "aws"
        folder.mkdir(parents=True, exist_ok=True)
        assert self._moto is not None
        doc = {"url": self.url, "moto_url": self._moto.url, "pid": os.getpid(),
               "region": self.config.region}
        tmp = folder / "endpoint.json.tmp"
        tmp.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
        tmp.replace(folder / "endpoint.json")

    def stop(self) -> None:
        """Stop serving, stop every node this endpoint booted, stop moto. Idempotent."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        if self.front is not None:
            self.front.shutdown()
            self.front = None
        if self._moto is not None:
            self._moto.stop()
            self._moto = None

    def __enter__(self) -> AwsEndpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_in_thread(state_dir: str | Path, **kwargs: Any) -> AwsEndpoint:
    """An endpoint serving on a background thread; ``stop()`` it (or use ``with``)."""
    return AwsEndpoint(state_dir, **kwargs).start()
