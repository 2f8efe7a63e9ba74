"""One sandbox under one state directory: start, stop and inspect its components by PID.

Layout under <state>/sandbox/: pids/<component>.pid, logs/<component>.log, settings.json (the
ports and addresses chosen, reused by the next `up` while they are free), account.json (what
`up` created in the AWS endpoint). <state>/sandbox.env is the sourceable environment.
"""

from __future__ import annotations

import json
import os
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path

from sandbox import s3 as sandbox_s3
from sandbox.orchestrator import procs
from sandbox.orchestrator.components import COMPONENTS, Component, ComponentError, Context

REPO = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 25.0
STOP_GRACE_S = 10.0
DEFAULTS = {"node_address_base": "127.0.0.11", "ssh_port": 2222, "aws_config": None}


def default_state_dir() -> Path:
    return Path(os.environ.get("PDLIFT_STATE_DIR") or REPO / ".pdlift").resolve()


def _free_port_except(taken: set[int]) -> int:
    for _ in range(100):
        port = sandbox_s3.free_port()
        if port not in taken:
            return port
    raise ComponentError("no free loopback port")


@dataclass
class ComponentStatus:
    name: str
    what: str
    built: bool
    pid: int | None
    running: bool
    address: str | None

    @property
    def state(self) -> str:
        return "not built" if not self.built else ("up" if self.running else "down")


@dataclass
class StartReport:
    started: list[str] = field(default_factory=list)
    already: list[str] = field(default_factory=list)
    not_built: list[str] = field(default_factory=list)
    seconds: float = 0.0


class Sandbox:
    def __init__(self, state_dir: Path, components: tuple[Component, ...] = COMPONENTS):
        self.state_dir = Path(state_dir).resolve()
        self.root = self.state_dir / "sandbox"
        self.components = components
        self.settings = self._load_settings()

    # --- files ------------------------------------------------------------------------
    @property
    def env_file(self) -> Path:
        return self.state_dir / "sandbox.env"

    def pid_file(self, name: str) -> Path:
        return self.root / "pids" / f"{name}.pid"

    def log_file(self, name: str) -> Path:
        return self.root / "logs" / f"{name}.log"

    def _load_settings(self) -> dict:
        try:
            return {**DEFAULTS, **json.loads((self.root / "settings.json").read_text())}
        except (OSError, ValueError):
            return dict(DEFAULTS)

    def _save_settings(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "settings.json").write_text(json.dumps(self.settings, indent=2) + "\n")

    @property
    def components_by_name(self) -> dict[str, Component]:
        return {c.name: c for c in self.components}

    def context(self) -> Context:
        return Context(self.state_dir, self.settings, REPO)

    # --- inspection -------------------------------------------------------------------
    def running_pid(self, name: str) -> int | None:
        pid = procs.read_pid(self.pid_file(name))
        return pid if pid and procs.belongs_to(pid, self.state_dir) else None

    def status(self) -> list[ComponentStatus]:
        ctx, out = self.context(), []
        for comp in self.components:
            pid = self.running_pid(comp.name)
            try:
                address = comp.address(ctx) if pid else None
            except KeyError:
                address = None
            out.append(ComponentStatus(comp.name, comp.what, comp.built(), pid, pid is not None,
                                       address))
        return out

    def env(self, names: set[str] | None = None) -> dict[str, str]:
        """The environment a client needs (what sandbox.env exports): for the running
        components, or for `names`."""
        env = {"AWS_ACCESS_KEY_ID": sandbox_s3.ACCESS_KEY,
               "AWS_SECRET_ACCESS_KEY": sandbox_s3.SECRET_KEY,
               "AWS_DEFAULT_REGION": sandbox_s3.REGION, "AWS_REGION": sandbox_s3.REGION,
               "AWS_EC2_METADATA_DISABLED": "true", "DO_NOT_TRACK": "1",
               "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
               "PDLIFT_STATE_DIR": str(self.state_dir)}
        ctx = self.context()
        for comp in self.components:
            if comp.name in names if names is not None else self.running_pid(comp.name):
                env.update(comp.env(ctx))
        return env

    def write_env_file(self) -> Path:
        lines = ["# Written by `scripts/sandbox up`: source it to point pdlift at the sandbox."]
        lines += [f"export {k}={shlex.quote(v)}" for k, v in sorted(self.env().items())]
        self.env_file.write_text("\n".join(lines) + "\n")
        return self.env_file

    # --- start ------------------------------------------------------------------------
    def _choose_ports(self, overrides: dict, starting: set[str]) -> None:
        """Explicit ports win; otherwise the last ones while still free; otherwise free ones."""
        s = self.settings
        s.update({k: overrides[k] for k in ("node_address_base", "ssh_port", "aws_config")
                  if overrides.get(k) is not None})
        taken: set[int] = set()
        for name, key in (("aws", "aws_port"), ("kube", "kube_port")):
            if name in starting:
                port = overrides.get(key) or s.get(key)
                if not overrides.get(key) and not (port and sandbox_s3.port_is_free(port)):
                    port = _free_port_except(taken)
                s[key] = port
            taken.add(s.get(key) or 0)
        if "s3" in starting:
            wanted, last = overrides.get("s3_port") or 0, s.get("s3_ports")
            reusable = last and (not wanted or last["s3"] == wanted) and all(
                sandbox_s3.port_is_free(p) and p not in taken for p in last.values())
            if not reusable:
                # not the AWS endpoint's or the kube API's, chosen above but not bound yet: kube starts
                # first, and SeaweedFS found its master's port taken ("port 11787 ... not available"),
                # or SeaweedFS did, and the AWS endpoint found its own in use
                s["s3_ports"] = sandbox_s3.choose_ports(wanted, frozenset(taken)).to_dict()

    def start(self, names: list[str] | None = None, overrides: dict | None = None,
              ready_timeout_s: float = READY_TIMEOUT_S) -> StartReport:
        """Start the named (default: all built) components that are not running, wait until
        each answers. On a failure, stops what this call started and raises ComponentError."""
        t0 = time.monotonic()
        report = StartReport()
        wanted = [c for c in self.components if names is None or c.name in names]
        to_start = []
        for comp in wanted:
            if not comp.built():
                report.not_built.append(comp.name)
            elif self.running_pid(comp.name):
                report.already.append(comp.name)
            else:
                to_start.append(comp)
        if not to_start:
            report.seconds = time.monotonic() - t0
            return report
        self._choose_ports(overrides or {}, {c.name for c in to_start})
        self._save_settings()
        ctx = self.context()
        pids = {}
        try:
            for comp in to_start:  # all at once: they start in parallel
                comp.before_start(ctx)
                env = comp.process_env(self._child_env({c.name for c in to_start}))
                pids[comp.name] = procs.spawn(comp.command(ctx), env, self.log_file(comp.name),
                                              self.pid_file(comp.name), REPO)
            for comp in to_start:
                pid = pids[comp.name]
                left = max(1.0, ready_timeout_s - (time.monotonic() - t0))
                try:
                    comp.wait_ready(ctx, lambda pid=pid: procs.alive(pid), left)
                except Exception as exc:
                    raise ComponentError(f"{comp.name}: {exc}\n{self.log_tail(comp.name)}") \
                        from exc
                report.started.append(comp.name)
        except BaseException:
            self.stop([c.name for c in to_start])
            raise
        report.seconds = time.monotonic() - t0
        return report

    def _child_env(self, starting: set[str]) -> dict[str, str]:
        """Each component sees the sandbox's own environment (its dummy credentials and every
        endpoint, so the Kubernetes stand-in knows the STS one), never the caller's AWS_*."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        running = {c.name for c in self.components if self.running_pid(c.name)}
        env.update(self.env(running | starting))
        return env

    def log_tail(self, name: str, lines: int = 15) -> str:
        try:
            text = self.log_file(name).read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return f"(no log at {self.log_file(name)})"
        return f"--- last lines of {self.log_file(name)} ---\n" + "\n".join(text)

    # --- stop -------------------------------------------------------------------------
    def stop(self, names: list[str] | None = None) -> list[tuple[str, int | None, str]]:
        """Stop components by PID (reverse start order), then any process a component left
        behind with a PID file under the state dir (node sshds). Returns (name, pid, outcome)."""
        ctx, done = self.context(), []
        for comp in reversed(self.components):
            if names is not None and comp.name not in names:
                continue
            pid_file = self.pid_file(comp.name)
            pid = procs.read_pid(pid_file)
            if pid is None:
                continue
            outcome = procs.stop(pid, self.state_dir, STOP_GRACE_S)
            done.append((comp.name, pid, outcome))
            pid_file.unlink(missing_ok=True)
            try:
                comp.after_stop(ctx)
            except KeyError:  # never configured: nothing to clean
                pass
        if names is None:
            done += self.sweep()
        return done

    def sweep(self) -> list[tuple[str, int | None, str]]:
        """What components started and left running (node sshds after an AWS endpoint crash):
        processes named by a PID file under <state>/sandbox, and session leaders started for
        this state dir, each with its process group."""
        done: list[tuple[str, int | None, str]] = []
        if not self.root.is_dir():
            return done
        found: dict[int, str] = {}
        for pid_file in sorted(self.root.rglob("*.pid")):
            pid = procs.read_pid(pid_file)
            if pid and procs.belongs_to(pid, self.state_dir):
                found[pid] = str(pid_file.relative_to(self.root))
        for pid in procs.session_leaders(self.state_dir):
            found.setdefault(pid, " ".join(procs.cmdline(pid)[:1]) or "process")
        for pid, label in found.items():
            outcome = procs.stop(pid, self.state_dir, 3.0, whole_group=True)
            done.append((label, pid, outcome))
        return done
