"""``python -m sandbox.aws`` as scripts/sandbox runs it: serves until SIGTERM, loopback only."""

from __future__ import annotations

import json
import subprocess
import sys

import boto3

from tests.sandbox.aws.helpers import NO_RETRIES, admin
from tests.sandbox.aws.process import REPO, free_port, start_aws_process, stop_process


def test_the_service_answers_health_serves_ec2_and_stops_on_sigterm(tmp_path):
    port = free_port()
    proc, url = start_aws_process(tmp_path, port,
                                  ["--node-manager", "tests.sandbox.aws.fake_nodes:FakeNodeManager",
                                   "--node-address-base", "127.0.0.51"])
    try:
        assert admin(_Url(url), "GET", "/__sandbox/health")["status"] == "ok"
        ec2 = boto3.client("ec2", endpoint_url=url, region_name="us-east-2",
                           aws_access_key_id="testing", aws_secret_access_key="testing",
                           config=NO_RETRIES)
        instance = ec2.run_instances(ImageId="ami-12c6146b", InstanceType="p5en.48xlarge",
                                     MinCount=1, MaxCount=1)["Instances"][0]
        written = json.loads((tmp_path / "sandbox" / "aws" / "endpoint.json").read_text())
    finally:
        code = stop_process(proc)

    assert instance["PrivateIpAddress"] == "127.0.0.51"
    assert written["url"] == url and written["pid"] == proc.pid
    assert code == 0


def test_the_service_refuses_to_bind_a_non_loopback_address(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "sandbox.aws", "--state-dir", str(tmp_path), "--host", "0.0.0.0",
         "--no-nodes"], cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode != 0
    assert "loopback" in out.stderr


class _Url:
    """``admin`` takes anything with a ``url``."""

    def __init__(self, url: str) -> None:
        self.url = url

