"""The demo's notification receiver: a webhook on 127.0.0.1 that appends what Prefect's automations
send (`pdlift notify install`) to a file, one JSON document per line, and answers 204.
usage: python scripts/demo_webhook.py PORT FILE"""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

MAX_BODY = 1 << 20


def serve(port: int, out: Path) -> None:
    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            size = min(int(self.headers.get("Content-Length") or 0), MAX_BODY)
            body = self.rfile.read(size).decode("utf-8", "replace")
            try:
                doc = json.loads(body)
            except ValueError:
                doc = {"text": body}
            with open(out, "a") as fh:
                fh.write(json.dumps(doc) + "\n")
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args) -> None:  # quiet: the file is the record
            pass

    ThreadingHTTPServer(("127.0.0.1", port), Receiver).serve_forever()


if __name__ == "__main__":
    serve(int(sys.argv[1]), Path(sys.argv[2]))
