"""`scripts/sandbox up | down | status`: the local sandbox, on loopback, by PID.

up      start every built component (S3, AWS endpoint, Kubernetes API stand-in), wait until
        each answers, upload the synthetic model, create what the blueprint expects to find
        in the account, and write <state>/sandbox.env. A no-op that says so when already up.
        --real-engines: vLLM pods run the real CPU build on the real small model, which is
        uploaded instead (blueprint default: blueprints/sandbox-real-vllm.yaml; install it
        first with scripts/setup --real-engines; sandbox/orchestrator/real_engines.py).
down    stop what `up` started (and the node sshds the AWS endpoint started), nothing else.
status  each component: built or not, PID, address, up or down.

State: $PDLIFT_STATE_DIR, else <repo>/.pdlift.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import sys
import time
from pathlib import Path

from sandbox.orchestrator import real_engines
from sandbox.orchestrator.components import NODES_BUILT, ComponentError
from sandbox.orchestrator.provision import DEFAULT_BLUEPRINT, load_blueprint, provision
from sandbox.orchestrator.stack import Sandbox, default_state_dir

def cmd_up(sb: Sandbox, args) -> int:
    t0 = time.monotonic()
    bp = load_blueprint(args.blueprint or (real_engines.BLUEPRINT if args.real_engines else DEFAULT_BLUEPRINT))
    model_dir = None
    if args.real_engines:
        from sandbox.engines import real

        try:
            os.environ.update(real_engines.prepare(sb.state_dir, bool(sb.running_pid("kube"))))
        except (real_engines.NotReady, OSError) as exc:
            print(f"sandbox up --real-engines: {exc}", file=sys.stderr)
            return 1
        model_dir = real.model_dir()
        print(f"real engines: vLLM CPU build from {real.venv()}, model {model_dir}")
    sandbox_spec = bp.sandbox
    overrides = {
        "s3_port": args.s3_port, "aws_port": args.aws_port, "kube_port": args.kube_port,
        "node_address_base": args.node_address_base or (
            sandbox_spec.node_address_base if sandbox_spec else None),
        "ssh_port": args.ssh_port or (sandbox_spec.ssh_port if sandbox_spec else None),
        "aws_config": str(Path(args.aws_config).resolve()) if args.aws_config else None,
    }
    try:
        report = sb.start(overrides=overrides, ready_timeout_s=args.timeout)
    except ComponentError as exc:
        print(f"sandbox up failed: {exc}", file=sys.stderr)
        return 1
    for name in report.not_built:
        print(f"{name}: not built yet (skipped)")
    if "aws" in report.started and not NODES_BUILT():
        print("nodes: not built yet (the AWS endpoint launches instances without GPU nodes)")
    if not report.started:
        if report.already:
            print(f"sandbox already up ({', '.join(report.already)}); "
                  f"environment in {sb.env_file}")
            sb.write_env_file()
            return 0
        print("sandbox up: no component is built", file=sys.stderr)
        return 1
    print(f"started {', '.join(report.started)} in {report.seconds:.1f} s")
    size = args.model_size_mb or (sandbox_spec.model_size_mb if sandbox_spec else 256)
    try:
        provision(sb, bp, size, args.seed, model_dir=model_dir)
    except Exception as exc:
        print(f"sandbox up: provisioning failed: {exc}; stopping", file=sys.stderr)
        sb.stop()
        return 1
    sb.write_env_file()
    print(f"sandbox up in {time.monotonic() - t0:.1f} s; source {sb.env_file}")
    return 0


def cmd_down(sb: Sandbox, args) -> int:
    results = sb.stop()
    for name, pid, outcome in results:
        print(f"{name}: pid {pid} {outcome}")
    if not results:
        print("sandbox: nothing running")
    sb.env_file.unlink(missing_ok=True)
    return 0


def cmd_status(sb: Sandbox, args) -> int:
    rows = sb.status()
    print(f"state: {sb.state_dir}")
    print(f"{'component':<10} {'state':<10} {'pid':<8} {'address':<28} what")
    for r in rows:
        print(f"{r.name:<10} {r.state:<10} {r.pid or '-':<8} {r.address or '-':<28} {r.what}")
    netns_holder = real_engines.holder(sb.state_dir)
    if netns_holder:
        print(f"{'engines':<10} {'real':<10} {netns_holder:<8} {'/proc/%d/ns/net' % netns_holder:<28} "
              "vLLM CPU build in its own network namespace (--real-engines)")
    if sb.env_file.exists() and any(r.running for r in rows):
        print(f"environment: source {sb.env_file}")
    return 0


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="scripts/sandbox", description=__doc__.split("\n")[0])
    ap.add_argument("--state-dir", type=Path, default=None,
                    help="default: $PDLIFT_STATE_DIR or <repo>/.pdlift")
    sub = ap.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start the sandbox")
    up.add_argument("--blueprint", type=Path, default=None,
                    help="default: blueprints/sandbox-2p2d.yaml (--real-engines: sandbox-real-vllm.yaml)")
    up.add_argument("--real-engines", action="store_true",
                    help="vLLM pods run the real CPU build (scripts/setup --real-engines installs it)")
    up.add_argument("--s3-port", type=int, default=None, help="default: a free port")
    up.add_argument("--aws-port", type=int, default=None, help="default: a free port")
    up.add_argument("--kube-port", type=int, default=None, help="default: a free port")
    up.add_argument("--node-address-base", default=None, help="default: the blueprint's")
    up.add_argument("--ssh-port", type=int, default=None, help="default: the blueprint's")
    up.add_argument("--aws-config", default=None, help="AWS endpoint config (capacity, ...)")
    up.add_argument("--model-size-mb", type=int, default=None, help="default: the blueprint's")
    up.add_argument("--seed", type=int, default=0)
    up.add_argument("--timeout", type=float, default=25.0, help="seconds to wait for answers")
    sub.add_parser("down", help="stop the sandbox")
    sub.add_parser("status", help="show each component")
    return ap.parse_args(argv)


@contextlib.contextmanager
def exclusive(sb: Sandbox, timeout_s: float = 120.0):
    """One `up` or `down` at a time per state dir (a second waits, bounded)."""
    sb.root.mkdir(parents=True, exist_ok=True)
    with open(sb.root / ".lock", "w") as lock:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise SystemExit(f"another `scripts/sandbox` holds {sb.root / '.lock'}")
                time.sleep(0.2)
        yield


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    sb = Sandbox(args.state_dir or default_state_dir())
    if args.command == "status":
        return cmd_status(sb, args)
    with exclusive(sb):
        return {"up": cmd_up, "down": cmd_down}[args.command](sb, args)


if __name__ == "__main__":
    sys.exit(main())
