"""`scripts/sandbox up | status | down`, run as a developer would, in its own state dir and on
ports and node addresses no developer's sandbox uses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from sandbox import s3 as sandbox_s3
from sandbox.orchestrator.components import (NODES_BUILT, S3, Component, ComponentError,
                                              module_exists, wait_until)
from sandbox.orchestrator.provision import DEFAULT_BLUEPRINT, load_blueprint
from sandbox.orchestrator.stack import Sandbox
from tests.fixtures import loopback
from tests.fixtures.strict import missing
from tests.timing import timing

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "sandbox"


def sandbox_cmd(state: Path, *args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    env = {**os.environ, "PDLIFT_STATE_DIR": str(state)}
    return subprocess.run([str(SCRIPT), *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def processes_naming(state: Path) -> set[int]:
    """Every live process whose command line mentions the state dir (observed independently
    of the code under test)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                argv = (entry / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if str(state) in argv and running(int(entry.name)):
                found.add(int(entry.name))
    return found


def pid_files(state: Path) -> dict[str, int]:
    return {p.stem: int(p.read_text().split()[0])
            for p in (state / "sandbox" / "pids").glob("*.pid")}


def read_env_file(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        if line.startswith("export "):
            key, _, value = line[len("export "):].partition("=")
            out[key] = value.strip("'")
    return out


@dataclass
class UpRun:
    state: Path
    result: subprocess.CompletedProcess
    seconds: float
    ports: dict[str, int]
    args: list[str]


@pytest.fixture(scope="module")
def sandbox_up(tmp_path_factory):
    state = tmp_path_factory.mktemp("sandbox-up")
    ports = {name: sandbox_s3.free_port() for name in ("s3", "aws", "kube", "ssh")}
    args = ["up", "--s3-port", str(ports["s3"]), "--aws-port", str(ports["aws"]),
            "--kube-port", str(ports["kube"]), "--ssh-port", str(ports["ssh"]),
            "--node-address-base", loopback.node_base(),
            "--model-size-mb", "16"]
    t0 = time.monotonic()
    result = sandbox_cmd(state, *args)
    yield UpRun(state, result, time.monotonic() - t0, ports, args)
    sandbox_cmd(state, "down")
    for pid in processes_naming(state):  # only if down failed: never leave ours behind
        os.kill(pid, signal.SIGKILL)


@timing  # a wall-clock bound on `scripts/sandbox up`
def test_up_starts_the_sandbox_in_under_30_seconds_and_writes_a_sourceable_env(sandbox_up):
    assert sandbox_up.result.returncode == 0, sandbox_up.result.stderr
    assert sandbox_up.seconds < 30
    assert "sandbox up in" in sandbox_up.result.stdout
    env = read_env_file(sandbox_up.state / "sandbox.env")
    assert env["AWS_ENDPOINT_URL_S3"] == f"http://127.0.0.1:{sandbox_up.ports['s3']}"
    assert env["AWS_DEFAULT_REGION"] == "us-east-2" and env["DO_NOT_TRACK"] == "1"
    if "aws" in pid_files(sandbox_up.state):
        aws = f"http://127.0.0.1:{sandbox_up.ports['aws']}"
        for service in ("EC2", "EKS", "STS", "IAM", "SSM", "SERVICE_QUOTAS"):
            assert env[f"AWS_ENDPOINT_URL_{service}"] == aws
        assert env["PDLIFT_SANDBOX_ADMIN"] == aws
        assert Path(env["PDLIFT_SSH_KEY_FILE"]).is_file()
    if "kube" in pid_files(sandbox_up.state):
        assert Path(env["KUBECONFIG"]).is_file()
    # Sourced by a shell, plain boto3 (endpoint from AWS_ENDPOINT_URL_S3) finds the model.
    probe = ("import boto3; o = boto3.client('s3').head_object(Bucket='pdlift-weights', "
             "Key='tiny-moe-mla/config.json'); print(o['ContentLength'])")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    shell = subprocess.run(
        ["bash", "-c", f'source "$1" && exec "$2" -c "$3"', "sh",
         str(sandbox_up.state / "sandbox.env"), sys.executable, probe],
        env=clean, capture_output=True, text=True, timeout=60)
    assert shell.returncode == 0, shell.stderr
    assert int(shell.stdout) > 0


def test_status_shows_each_component_with_its_pid_and_address(sandbox_up):
    result = sandbox_cmd(sandbox_up.state, "status")
    assert result.returncode == 0
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines()[2:]
            if line.split() and line.split()[0] in ("s3", "aws", "kube")}
    assert set(rows) == {"s3", "aws", "kube"}
    pids = pid_files(sandbox_up.state)
    for name, row in rows.items():
        if name in pids:
            assert row[1] == "up" and row[2] == str(pids[name])
            assert row[3].endswith(f"127.0.0.1:{sandbox_up.ports[name]}")
        else:
            assert row[1:3] == ["not", "built"]


def test_up_creates_what_the_blueprint_expects_to_find_in_the_account(sandbox_up):
    if "aws" not in pid_files(sandbox_up.state):
        missing("the AWS endpoint is not built yet")
    ec2, eks = (aws_client(sandbox_up.state, svc) for svc in ("ec2", "eks"))
    bp = load_blueprint(DEFAULT_BLUEPRINT)
    for zone, name in bp.aws.subnets.items():
        found = ec2.describe_subnets(Filters=[{"Name": "tag:Name", "Values": [name]}])["Subnets"]
        assert [s["AvailabilityZone"] for s in found] == [zone]
    group = ec2.describe_security_groups(Filters=[
        {"Name": "group-name", "Values": [bp.aws.security_group]}])["SecurityGroups"][0]
    for rules in (group["IpPermissions"], group["IpPermissionsEgress"]):
        assert any(r["IpProtocol"] == "-1" and group["GroupId"] in
                   [p["GroupId"] for p in r["UserIdGroupPairs"]] for r in rules)
    assert ec2.describe_key_pairs(KeyNames=[bp.aws.ssh.key_pair])["KeyPairs"]
    assert eks.describe_cluster(name=bp.aws.eks.cluster)["cluster"]["name"] == bp.aws.eks.cluster


def test_up_again_is_a_no_op_that_says_so(sandbox_up):
    before = pid_files(sandbox_up.state)
    again = sandbox_cmd(sandbox_up.state, *sandbox_up.args)
    assert again.returncode == 0, again.stderr
    assert "already up" in again.stdout
    assert pid_files(sandbox_up.state) == before
    assert all(running(pid) for pid in before.values())


def aws_client(state: Path, service: str):
    """A boto3 client configured only from sandbox.env."""
    import boto3

    env = read_env_file(state / "sandbox.env")
    return boto3.client(service, endpoint_url=env[f"AWS_ENDPOINT_URL_{service.upper()}"],
                        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
                        region_name=env["AWS_DEFAULT_REGION"])


def launch_nodes(state: Path, count: int) -> list[str]:
    """Instances through the AWS endpoint, as pdlift would: each boots an sshd."""
    account = json.loads((state / "sandbox" / "account.json").read_text())
    ec2 = aws_client(state, "ec2")
    ami = aws_client(state, "ssm").get_parameter(
        Name=load_blueprint(DEFAULT_BLUEPRINT).aws.eks.ami_ssm_parameter)["Parameter"]["Value"]
    reply = ec2.run_instances(ImageId=ami, InstanceType="m5.large", MinCount=count,
                              MaxCount=count, SubnetId=account["subnets"]["us-east-2a"],
                              KeyName=account["key_pair"])
    return [i["PrivateIpAddress"] for i in reply["Instances"]]


def test_down_stops_every_process_up_started_and_nothing_else(sandbox_up, tmp_path):
    nodes_expected = "aws" in pid_files(sandbox_up.state) and NODES_BUILT()
    if nodes_expected:
        launch_nodes(sandbox_up.state, 2)
        # The AWS endpoint crashes: down must still find the node sshds it left behind.
        os.kill(pid_files(sandbox_up.state)["aws"], signal.SIGKILL)
    started = processes_naming(sandbox_up.state) | set(pid_files(sandbox_up.state).values())
    if nodes_expected:
        node_pid_files = [p for p in (sandbox_up.state / "sandbox").rglob("*.pid")
                          if p.parent.name != "pids"]
        assert len(node_pid_files) >= 2
    assert started
    # A process that is not ours, even with a PID file in the state dir, must survive.
    decoy = subprocess.Popen(["sleep", "60"], cwd=tmp_path)
    (sandbox_up.state / "sandbox" / "pids" / "decoy.pid").write_text(f"{decoy.pid}\n")
    try:
        result = sandbox_cmd(sandbox_up.state, "down")
        assert result.returncode == 0, result.stderr
        assert [pid for pid in started if running(pid)] == []
        assert processes_naming(sandbox_up.state) == set()
        assert decoy.poll() is None
    finally:
        decoy.kill()
        decoy.wait()
    status = sandbox_cmd(sandbox_up.state, "status").stdout
    assert " up " not in status


def _component(name: str, built, argv: list[str]) -> Component:
    return Component(
        name=name, what=f"{name} (test)", built=built, command=lambda ctx: argv,
        address=lambda ctx: "-", env=lambda ctx: {},
        wait_ready=lambda ctx, alive, t: wait_until(lambda: False, name, t, alive))


def test_a_component_not_built_yet_is_reported_and_skipped(tmp_path):
    ghost = _component("ghost", module_exists("sandbox.no_such_component"), ["true"])
    sandbox = Sandbox(tmp_path, components=(ghost,))
    report = sandbox.start()
    assert report.not_built == ["ghost"] and report.started == []
    assert [s.state for s in sandbox.status()] == ["not built"]


def test_a_component_that_dies_at_start_fails_up_loudly_and_stops_the_others(tmp_path):
    broken = _component("broken", lambda: True,
                        [sys.executable, "-c", "print('broken on purpose'); raise SystemExit(3)"])
    sandbox = Sandbox(tmp_path, components=(S3, broken))
    with pytest.raises(ComponentError, match="broken on purpose"):
        sandbox.start(ready_timeout_s=20)
    assert processes_naming(tmp_path) == set()
    assert [s.state for s in sandbox.status()] == ["down", "down"]
