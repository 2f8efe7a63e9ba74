"""With the real NodeManager: the host key in GetConsoleOutput is the key the node's sshd
presents, so paramiko with pinned keys (RejectPolicy) connects, and terminate stops the node."""

from __future__ import annotations

import base64
import os
import pwd
import shutil
import socket

import boto3
import paramiko
import pytest

from sandbox.aws import start_in_thread
from tests.fixtures.strict import import_or_missing, missing
from tests.fixtures import loopback
from tests.sandbox.aws.helpers import NO_RETRIES, admin
from tests.sandbox.aws.process import free_port

# Both are what scripts/setup provides: a skip on a developer's machine, a failure under CI=true.
manager = import_or_missing("sandbox.nodes.manager")
if shutil.which("sshd") is None and not os.path.exists("/usr/sbin/sshd"):
    missing("OpenSSH server (sshd) is not installed", allow_module_level=True)


def pinned_keys(console: str) -> list[paramiko.PKey]:
    block = console.split("-----BEGIN SSH HOST KEY KEYS-----", 1)[1]
    block = block.split("-----END SSH HOST KEY KEYS-----", 1)[0]
    keys = []
    for line in block.strip().splitlines():
        kind, blob = line.split()[:2]
        keys.append(paramiko.PKey.from_type_string(kind, base64.b64decode(blob)))
    return keys


def test_paramiko_connects_to_a_launched_node_with_the_host_key_from_its_console(tmp_path):
    ssh_port = free_port()
    nodes = manager.NodeManager(tmp_path, loopback.node_base(), ssh_port)
    with start_in_thread(tmp_path, node_manager=nodes) as aws:
        admin(aws, "POST", "/__sandbox/reset")
        ec2 = boto3.client("ec2", endpoint_url=aws.url, region_name="us-east-2",
                           aws_access_key_id="testing", aws_secret_access_key="testing",
                           config=NO_RETRIES)
        instance = ec2.run_instances(ImageId="ami-12c6146b", InstanceType="p5en.48xlarge",
                                     MinCount=1, MaxCount=1)["Instances"][0]
        address = instance["PrivateIpAddress"]
        console = ec2.get_console_output(InstanceId=instance["InstanceId"])["Output"]

        client = paramiko.SSHClient()
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        for key in pinned_keys(console):
            client.get_host_keys().add(f"[{address}]:{ssh_port}", key.get_name(), key)
        client.connect(address, port=ssh_port, username=pwd.getpwuid(os.getuid()).pw_name,
                       key_filename=str(manager.ensure_client_key(tmp_path)),
                       look_for_keys=False, allow_agent=False, timeout=10)
        try:
            _, out, _ = client.exec_command("echo node-up", timeout=10)
            said = out.read().decode().strip()
        finally:
            client.close()

        ec2.terminate_instances(InstanceIds=[instance["InstanceId"]])
        with pytest.raises(OSError), socket.create_connection((address, ssh_port), timeout=2):
            pass

    assert address.startswith("127.0.")
    assert said == "node-up"
