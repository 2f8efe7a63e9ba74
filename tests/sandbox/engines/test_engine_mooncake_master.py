"""The Mooncake master stand-in: gflags command line, health, metrics, HTTP metadata store."""

from __future__ import annotations

from .client import fetch


def test_the_mooncake_master_serves_health_metrics_and_the_metadata_store(engine_launcher):
    port, metrics_port, meta_port = (engine_launcher.port() for _ in range(3))
    master = engine_launcher.start(
        ["mooncake_master", f"--port={port}", "--metrics_port", str(metrics_port), "--enable_gc",
         "--enable_http_metadata_server=true", f"--http_metadata_server_port={meta_port}"], "master")
    master.wait_http(f"http://127.0.0.1:{port}/health")
    metadata = f"http://127.0.0.1:{meta_port}/metadata?key=seg"
    assert fetch(metadata, data=b"v1", method="PUT")[0] == 200
    assert fetch(metadata) == (200, b"v1")
    status, text = fetch(f"http://127.0.0.1:{metrics_port}/metrics")
    assert status == 200 and b"master_key_count 1" in text
    assert "enable_gc=true" in master.log()
