"""The sandbox's long-running components: how each starts, answers, and shows up in sandbox.env.

Adding a component is one `Component(...)` entry in COMPONENTS. Its command must name the
state dir (e.g. `--state-dir DIR`): that is how `down` knows a PID is still one of ours. A
component whose Python module (or binary) is absent is reported as "not built" and skipped;
one that exists but does not answer in time fails `up` loudly.
"""

from __future__ import annotations

import importlib.util
import json
import ssl
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from sandbox import s3 as sandbox_s3

LOOPBACK = "127.0.0.1"
# The AWS SDK endpoint variables that point at the sandbox AWS endpoint. AWS_ENDPOINT_URL is the
# catch-all, so a service nobody listed still goes to loopback, never to real AWS.
AWS_SERVICES = ("EC2", "EKS", "STS", "IAM", "SSM", "SERVICE_QUOTAS")


class ComponentError(RuntimeError):
    """A built component failed to start or answer."""


@dataclass
class Context:
    """What a component needs to know: where state lives and the chosen settings."""

    state_dir: Path  # $PDLIFT_STATE_DIR; components keep their files in state_dir/sandbox
    settings: dict  # ports, addresses: see Sandbox.settings
    repo: Path

    @property
    def root(self) -> Path:
        return self.state_dir / "sandbox"


def _python_module(ctx: Context, module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, "--state-dir", str(ctx.state_dir),
            "--host", LOOPBACK, *args]


def _http_answers(url: str, ok: Callable[[int], bool], context: ssl.SSLContext | None = None,
                  timeout_s: float = 2.0) -> bool:
    # No proxy handler: a probe of a loopback address must never go through an HTTP proxy.
    handlers: list = [urllib.request.ProxyHandler({})]
    if context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=context))
    try:
        with urllib.request.build_opener(*handlers).open(url, timeout=timeout_s) as resp:
            return ok(resp.status)
    except urllib.error.HTTPError as exc:
        return ok(exc.code)
    except (OSError, ValueError):
        return False


def wait_until(check: Callable[[], bool], what: str, timeout_s: float,
               alive: Callable[[], bool]) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive():
            raise ComponentError(f"{what} exited during start-up")
        if check():
            return
        time.sleep(0.1)
    raise ComponentError(f"{what} did not answer within {timeout_s:.0f} s")


@dataclass(frozen=True)
class Component:
    name: str
    what: str  # one line for `status`
    built: Callable[[], bool]
    command: Callable[[Context], list[str]]
    address: Callable[[Context], str]
    wait_ready: Callable[[Context, Callable[[], bool], float], None]
    env: Callable[[Context], dict[str, str]]
    before_start: Callable[[Context], None] = field(default=lambda ctx: None)
    after_stop: Callable[[Context], None] = field(default=lambda ctx: None)
    process_env: Callable[[dict[str, str]], dict[str, str]] = field(default=dict)


def module_exists(module: str) -> Callable[[], bool]:
    """Whether `module` is there. find_spec imports its parent packages: one that is absent means
    "not built"; one that is there but fails to import (a broken __init__, a dependency it lacks)
    raises, so it is not mistaken for a component still to be written."""
    def check() -> bool:
        try:
            return importlib.util.find_spec(module) is not None
        except ModuleNotFoundError as exc:
            if exc.name and (module == exc.name or module.startswith(exc.name + ".")):
                return False  # the module or a package above it is absent
            raise
    return check


def _weed_found() -> bool:
    try:
        sandbox_s3.weed_binary()
        return True
    except sandbox_s3.S3Error:
        return False


# --- S3 (SeaweedFS) -----------------------------------------------------------------------

def _s3_ports(ctx: Context) -> sandbox_s3.S3Ports:
    return sandbox_s3.S3Ports(**ctx.settings["s3_ports"])


def _s3_url(ctx: Context) -> str:
    return f"http://{LOOPBACK}:{ctx.settings['s3_ports']['s3']}"


S3 = Component(
    name="s3", what="S3 (SeaweedFS weed mini)", built=_weed_found,
    command=lambda ctx: sandbox_s3.weed_command(ctx.root / "s3", _s3_ports(ctx)),
    address=_s3_url,
    wait_ready=lambda ctx, alive, t: sandbox_s3.wait_ready(_s3_url(ctx), t, alive),
    env=lambda ctx: {"AWS_ENDPOINT_URL_S3": _s3_url(ctx)},
    after_stop=lambda ctx: sandbox_s3.cleanup_sockets(_s3_ports(ctx)),
    process_env=sandbox_s3.weed_env,
)


# --- AWS endpoint (moto + what moto lacks) -----------------------------------------------

# GPU nodes are not a process of their own: the AWS endpoint boots them through this module.
NODES_BUILT = module_exists("sandbox.nodes.manager")


def _aws_url(ctx: Context) -> str:
    return f"http://{LOOPBACK}:{ctx.settings['aws_port']}"


def _aws_command(ctx: Context) -> list[str]:
    s = ctx.settings
    argv = _python_module(ctx, "sandbox.aws", "--port", str(s["aws_port"]),
                          "--node-address-base", s["node_address_base"],
                          "--ssh-port", str(s["ssh_port"]))
    if s.get("aws_config"):
        argv += ["--config", s["aws_config"]]
    if not NODES_BUILT():  # API-only until the node manager exists
        argv.append("--no-nodes")
    return argv


def _aws_env(ctx: Context) -> dict[str, str]:
    from sandbox.orchestrator.account import client_key

    url = _aws_url(ctx)
    env = {f"AWS_ENDPOINT_URL_{svc}": url for svc in AWS_SERVICES}
    env.update(AWS_ENDPOINT_URL=url, PDLIFT_SANDBOX_ADMIN=url,
               PDLIFT_SSH_KEY_FILE=str(client_key(ctx.state_dir)))
    return env


def _aws_ready(ctx: Context, alive: Callable[[], bool], timeout_s: float) -> None:
    url = _aws_url(ctx) + "/__sandbox/health"
    wait_until(lambda: _http_answers(url, lambda code: code == 200), f"AWS endpoint {url}",
               timeout_s, alive)


def _aws_before_start(ctx: Context) -> None:
    # The SSH client key must exist before the endpoint boots nodes that authorise it.
    from sandbox.orchestrator.account import client_key

    client_key(ctx.state_dir)


AWS = Component(
    name="aws", what="AWS endpoint (moto + EC2 capacity APIs, GPU nodes)",
    built=module_exists("sandbox.aws.__main__"), command=_aws_command, address=_aws_url,
    wait_ready=_aws_ready, env=_aws_env, before_start=_aws_before_start,
)


# --- Kubernetes API stand-in ---------------------------------------------------------------

def _kube_files(ctx: Context) -> tuple[Path, Path]:
    return ctx.root / "kube" / "endpoint.json", ctx.root / "kube" / "kubeconfig"


def _system_node_address(ctx: Context) -> str:
    """The address just below the first GPU node's (127.0.0.10 for the default 127.0.0.11): a
    sandbox with node addresses of its own gets a CPU node (where routers bind) of its own too."""
    import ipaddress

    return str(ipaddress.IPv4Address(ctx.settings.get("node_address_base") or "127.0.0.11") - 1)


def _kube_ready(ctx: Context, alive: Callable[[], bool], timeout_s: float) -> None:
    endpoint, _ = _kube_files(ctx)
    # A liveness probe only: any HTTP answer (401 without a token included) means it is up.
    # Clients verify the server against the kubeconfig's CA; the probe need not.
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE

    def answers() -> bool:
        try:
            server = json.loads(endpoint.read_text())["server"]
        except (OSError, ValueError, KeyError):
            return False
        return _http_answers(server.rstrip("/") + "/version", lambda code: code > 0, insecure)

    wait_until(answers, "Kubernetes API stand-in", timeout_s, alive)


KUBE = Component(
    name="kube", what="Kubernetes API stand-in (HTTPS)",
    built=module_exists("sandbox.kube.__main__"),
    command=lambda ctx: _python_module(ctx, "sandbox.kube", "--port", str(ctx.settings["kube_port"]),
                                       "--system-node-address", _system_node_address(ctx)),
    address=lambda ctx: f"https://{LOOPBACK}:{ctx.settings['kube_port']}",
    wait_ready=_kube_ready,
    env=lambda ctx: {"KUBECONFIG": str(_kube_files(ctx)[1])},
    # A stale endpoint.json from a killed run would make the probe trust an old port.
    before_start=lambda ctx: _kube_files(ctx)[0].unlink(missing_ok=True),
)

# Start order: the Kubernetes stand-in first (EKS DescribeCluster returns its endpoint.json).
COMPONENTS: tuple[Component, ...] = (KUBE, S3, AWS)
