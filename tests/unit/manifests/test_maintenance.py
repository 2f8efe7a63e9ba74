"""The maintenance responder: its rendered pod, and its script run for real on loopback."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx
import pytest

from sandbox.s3 import free_port
from tasks.planning.manifests import maintenance
from tests.unit.manifests.helpers import REFERENCE


def test_the_production_service_in_maintenance_selects_the_responder_and_names_the_colour_to_restore():
    svc = maintenance.production_service(REFERENCE, "blue")
    assert svc["spec"]["selector"] == maintenance.selector(REFERENCE)
    assert svc["spec"]["ports"][0]["targetPort"] == maintenance.MAINTENANCE_PORT
    assert svc["metadata"]["annotations"][maintenance.RESTORES_TO_ANNOTATION] == "blue"
    pod = maintenance.deployment(REFERENCE, 120)["spec"]["template"]
    assert pod["metadata"]["labels"].items() >= maintenance.selector(REFERENCE).items()
    [container] = pod["spec"]["containers"]
    assert container["image"] == REFERENCE.engine.image and container["command"][:2] == ["python3", "-c"]


@pytest.fixture
def responder():
    port = free_port()
    container = maintenance.deployment(REFERENCE, 45)["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    env.update(PORT=str(port), POD_IP="127.0.0.1", PATH=os.environ.get("PATH", ""))
    proc = subprocess.Popen([sys.executable, "-c", container["command"][2]], env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                httpx.get(url + maintenance.READY_PATH, timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.05)
        yield url
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_every_path_answers_503_with_retry_after_and_an_openai_error(responder):
    for method, path in (("GET", "/v1/models"), ("POST", "/v1/completions"), ("POST", "/v1/chat/completions")):
        r = httpx.request(method, responder + path, json={"model": "m", "prompt": "hi"}, timeout=5)
        assert r.status_code == 503 and r.headers["Retry-After"] == "45"
        assert r.json()["error"]["code"] == 503 and "maintenance" in r.json()["error"]["message"]


def test_its_readiness_path_answers_200(responder):
    assert httpx.get(responder + maintenance.READY_PATH, timeout=5).status_code == 200
