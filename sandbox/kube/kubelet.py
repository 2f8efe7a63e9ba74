"""The kubelet: runs the containers of pods bound to nodes as local processes.

Per container: image check (allow-list, else ErrImagePull/ImagePullBackOff), slow-start
fault, start (see ``containers``), probes (startup, then readiness and liveness; periods
capped by ``probe_period_cap_seconds``), exit handling with restart backoff (first restart
at once, then ``backoff_base_seconds`` doubling to ``backoff_cap_seconds``, shown as
CrashLoopBackOff), and kill by process group when the pod goes away. Pod status is composed
in ``podstatus``.
"""

from __future__ import annotations

import fnmatch
import hashlib
import shutil
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from sandbox.kube import containers, dns, podstatus, resources
from sandbox.kube.api import now_iso
from sandbox.kube.nodes import JOIN_ANNOTATION, node_address, node_ready
from sandbox.kube.podstatus import compose_status, lost_node_status, read_tail
from sandbox.kube.probes import run_probe

PODS = resources.lookup("", "v1", "pods")
CONFIGMAPS = resources.lookup("", "v1", "configmaps")
SECRETS = resources.lookup("", "v1", "secrets")
_FAIL_AT_START = ("import sys; sys.stderr.write('sandbox fault: crash injected at container "
                  "start\\n'); sys.exit(1)")


@dataclass
class Ctr:
    name: str
    spec: dict
    init: bool
    sidecar: bool
    log_dir: Path
    proc: object = None
    attempts: int = 0
    restarts: int = 0
    failures: int = 0
    next_start: float = 0.0
    started_mono: float = 0.0
    started_at: str = ""
    container_id: str = ""
    state: dict = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: dict = field(default_factory=dict)
    done: bool = False
    succeeded: bool = False
    ready: bool = False
    startup_ok: bool = False
    slow_until: float | None = None
    probe_due: dict = field(default_factory=dict)
    probe_runs: dict = field(default_factory=dict)
    probe_fail: dict = field(default_factory=dict)
    probe_ok: dict = field(default_factory=dict)

    def log_path(self, index: int) -> Path:
        return self.log_dir / f"{index}.log"


@dataclass
class PodRuntime:
    uid: str
    work: Path
    ctrs: list[Ctr]
    start_time: str


class Kubelet:
    def __init__(self, app):
        self.app = app
        self.pods: dict[str, PodRuntime] = {}
        self.dying: list[tuple[object, float]] = []
        self.probes = ThreadPoolExecutor(max_workers=4, thread_name_prefix="probe")
        self.hosts: dict[str, str] = {}  # cluster DNS table, refreshed by the runtime each tick

    # --- lifecycle -----------------------------------------------------------------------

    def _new_runtime(self, pod: dict) -> PodRuntime:
        meta, spec = pod["metadata"], pod["spec"]
        work = self.app.settings.kube_dir / "pods" / f"{meta['namespace']}_{meta['name']}_{meta['uid'][:8]}"
        ctrs = [Ctr(c["name"], c, True, c.get("restartPolicy") == "Always", work / "logs" / c["name"])
                for c in spec.get("initContainers") or []]
        ctrs += [Ctr(c["name"], c, False, False, work / "logs" / c["name"])
                 for c in spec.get("containers") or []]
        return PodRuntime(meta["uid"], work, ctrs, now_iso())

    def sync(self, pods: list[dict], nodes: dict[str, dict]) -> None:
        live = set()
        for pod in pods:
            node = nodes.get(pod["spec"].get("nodeName") or "")
            if node is None:
                continue
            live.add(pod["metadata"]["uid"])
            if not node_ready(node):
                self.app.api.write_status(PODS, pod, lost_node_status(pod))
                continue  # a kubelet that cannot post status changes nothing
            prt = self.pods.get(pod["metadata"]["uid"])
            if prt is None:
                prt = self.pods[pod["metadata"]["uid"]] = self._new_runtime(pod)
            self._step_pod(pod, prt, node_address(node), self._node_dir(node))
        for uid in [u for u in self.pods if u not in live]:
            self._stop(self.pods.pop(uid))
            self.app.recorder.forget(uid)
        self._reap()

    def _node_dir(self, node: dict) -> Path | None:
        """The sandbox node's directory (its NVMe under ``nvme/``), from the join record's instance id."""
        iid = ((node.get("metadata") or {}).get("annotations") or {}).get(JOIN_ANNOTATION)
        folder = self.app.settings.state_dir / "sandbox" / "nodes" / iid if iid else None
        return folder if folder is not None and folder.is_dir() else None

    def _step_pod(self, pod: dict, prt: PodRuntime, address: str, node_dir: Path | None = None) -> None:
        for c in prt.ctrs:
            if c.init and not c.sidecar:
                if not c.succeeded:
                    self._step(pod, prt, c, address, node_dir)
                    if not c.succeeded:
                        break  # later containers wait for this init container
                continue
            self._step(pod, prt, c, address, node_dir)
        self.app.api.write_status(PODS, pod, compose_status(pod, prt, address))

    def _stop(self, prt: PodRuntime) -> None:
        # As the container runtime stops a container: SIGTERM to its main process only (PID 1 in
        # the container; an engine's own children, such as vLLM's engine core and workers, are
        # shut down by it, not signalled directly), then SIGKILL to every process left once the
        # grace period ends (here a short fixed one) or the main process has gone (kubelet
        # kuberuntime_container.go killContainer; the runtime kills the whole PID namespace).
        for c in prt.ctrs:
            if c.proc is not None:
                containers.signal_main(c.proc, signal.SIGTERM)
                self.dying.append((c.proc, time.monotonic() + 3.0))
                c.proc = None
        shutil.rmtree(prt.work, ignore_errors=True)

    def _reap(self) -> None:
        still = []
        for proc, deadline in self.dying:
            if proc.poll() is None and time.monotonic() <= deadline:
                still.append((proc, deadline))
                continue
            containers.kill_group(proc, signal.SIGKILL)  # what is left of the container, if anything
            if proc.poll() is None:
                still.append((proc, deadline))
        self.dying = still

    def shutdown(self) -> None:
        for prt in list(self.pods.values()):
            self._stop(prt)
        self.pods.clear()
        deadline = time.monotonic() + 3.0
        while self.dying and time.monotonic() < deadline:
            self._reap()
            time.sleep(0.05)
        for proc, _ in self.dying:
            containers.kill_group(proc, signal.SIGKILL)
            proc.wait(timeout=5)
        self.dying = []
        self.probes.shutdown(wait=False, cancel_futures=True)

    # --- one container -------------------------------------------------------------------

    def _event(self, pod, etype, reason, message, interval=5.0):
        self.app.recorder.record(pod, etype, reason, message, component="kubelet",
                                 min_interval=interval)

    def _image_allowed(self, image: str) -> bool:
        if self.app.faults.image_pull_fails(image):
            return False
        if "@sha256:" in image:
            return True
        return any(fnmatch.fnmatchcase(image, pat) for pat in self.app.settings.allowed_images)

    def _step(self, pod: dict, prt: PodRuntime, c: Ctr, address: str, node_dir: Path | None = None) -> None:
        now = time.monotonic()
        if c.proc is not None:
            rc = c.proc.poll()
            if rc is None:
                if self.app.faults.kill_now(pod, c.name):
                    containers.kill_group(c.proc, signal.SIGKILL)
                else:
                    self._probe(pod, c, address, now)
                return
            # The main process is gone: so is the container, and every process it started.
            containers.kill_group(c.proc, signal.SIGKILL)
            self._exited(pod, c, rc, now)
            return
        if c.done or now < c.next_start:
            return
        image = c.spec.get("image", "")
        if not self._image_allowed(image):
            self._pull_failed(pod, c, image, now)
            return
        if c.slow_until is None:
            c.slow_until = now + self.app.faults.slow_start_seconds(pod)
        if now < c.slow_until:
            c.state = {"waiting": {"reason": "ContainerCreating"}}
            return
        try:
            env = containers.container_env(pod, c.spec, address, self._lookup, self.resolve)
            _, argv = containers.command_line(c.spec, env)
        except containers.NotReadyToStart as e:
            c.state = {"waiting": {"reason": e.reason, "message": e.message}}
            c.next_start = now + 0.5
            if e.reason == "CreateContainerConfigError":
                self._event(pod, "Warning", "Failed", f"Error: {e.message}", 30)
            return
        if self.app.faults.fail_at_start(pod, c.name):
            argv = [sys.executable, "-c", _FAIL_AT_START]
        if c.attempts == 0:
            self._event(pod, "Normal", "Pulled",
                        f'Container image "{image}" already present on machine')
        try:
            c.proc = containers.spawn(argv, containers.process_env(
                pod, env, address, self.app.settings.state_dir, c.spec,
                containers.host_mounts(pod, c.spec, node_dir)),
                                      c.log_path(c.attempts), prt.work)
        except OSError as e:
            c.state = {"waiting": {"reason": "RunContainerError", "message": str(e)}}
            c.next_start = now + 1.0
            return
        if c.attempts:
            c.restarts += 1
        c.attempts += 1
        c.started_mono, c.started_at = now, now_iso()
        c.container_id = "containerd://" + hashlib.sha256(
            f"{prt.uid}/{c.name}/{c.attempts}".encode()).hexdigest()
        c.state = {"running": {"startedAt": c.started_at}}
        c.ready, c.startup_ok = False, not c.spec.get("startupProbe")
        c.probe_due, c.probe_runs, c.probe_fail, c.probe_ok = {}, {}, {}, {}
        self._event(pod, "Normal", "Created", f"Created container: {c.name}")
        self._event(pod, "Normal", "Started", f"Started container {c.name}")

    def _pull_failed(self, pod: dict, c: Ctr, image: str, now: float) -> None:
        first = c.state.get("waiting", {}).get("reason") not in ("ErrImagePull", "ImagePullBackOff")
        self._event(pod, "Normal", "Pulling", f'Pulling image "{image}"', 30)
        self._event(pod, "Warning", "Failed",
                    f'Failed to pull image "{image}": rpc error: code = NotFound desc = failed to '
                    f'pull and unpack image "{image}": not found (the sandbox allows image '
                    f"digests and its configured allow-list)", 30)
        if first:
            c.state = {"waiting": {"reason": "ErrImagePull", "message": f'failed to pull image "{image}"'}}
        else:
            c.state = {"waiting": {"reason": "ImagePullBackOff",
                                   "message": f'Back-off pulling image "{image}"'}}
            self._event(pod, "Normal", "BackOff", f'Back-off pulling image "{image}"', 30)
        c.next_start = now + 1.0

    def _exited(self, pod: dict, c: Ctr, rc: int, now: float) -> None:
        code = rc if rc >= 0 else 128 - rc
        term = {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                "startedAt": c.started_at, "finishedAt": now_iso(), "containerID": c.container_id}
        if code and c.spec.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            term["message"] = read_tail(c.log_path(c.attempts - 1), 80, 4096).decode(errors="replace")
        c.proc, c.ready = None, False
        policy = pod["spec"].get("restartPolicy", "Always")
        if c.init and not c.sidecar:
            restart = code != 0 and policy != "Never"
        else:
            restart = c.sidecar or policy == "Always" or (policy == "OnFailure" and code != 0)
        if not restart:
            c.done, c.succeeded, c.state = True, code == 0, {"terminated": term}
            return
        settings = self.app.settings
        if now - c.started_mono > max(60.0, 2 * settings.backoff_cap_seconds):
            c.failures = 0  # it ran long enough: the next crash starts the backoff afresh
        delay = 0.0 if c.failures == 0 else min(
            settings.backoff_base_seconds * 2 ** (c.failures - 1), settings.backoff_cap_seconds)
        c.failures += 1
        c.last_state, c.next_start = {"terminated": term}, now + delay
        meta = pod["metadata"]
        if delay > 0:
            c.state = {"waiting": {"reason": "CrashLoopBackOff", "message": (
                f"back-off {delay:g}s restarting failed container={c.name} "
                f"pod={meta['name']}_{meta['namespace']}({meta['uid']})")}}
            self._event(pod, "Warning", "BackOff", f"Back-off restarting failed container {c.name} "
                        f"in pod {meta['name']}_{meta['namespace']}({meta['uid']})")
        else:
            c.state = {"terminated": term}

    def _probe(self, pod: dict, c: Ctr, address: str, now: float) -> None:
        cap = self.app.settings.probe_period_cap_seconds
        kinds = ["startupProbe"] if not c.startup_ok else ["readinessProbe", "livenessProbe"]
        for kind in kinds:
            probe = c.spec.get(kind)
            if not probe:
                continue
            run = c.probe_runs.get(kind)
            if run is not None:
                if not run.done():
                    continue
                del c.probe_runs[kind]
                self._probe_result(pod, c, kind, probe, *run.result())
                if c.proc is None or kind == "startupProbe":
                    return
            elif now >= c.probe_due.setdefault(
                    kind, c.started_mono + min(probe.get("initialDelaySeconds", 0), cap)):
                c.probe_runs[kind] = self.probes.submit(run_probe, probe, c.spec, address)
                c.probe_due[kind] = now + min(probe.get("periodSeconds", 10), cap)
        if c.startup_ok and not c.spec.get("readinessProbe"):
            c.ready = True

    def _probe_result(self, pod, c: Ctr, kind: str, probe: dict, ok: bool, msg: str) -> None:
        label = kind.replace("Probe", "").capitalize()
        if ok:
            c.probe_fail[kind] = 0
            c.probe_ok[kind] = c.probe_ok.get(kind, 0) + 1
            if kind == "startupProbe":
                c.startup_ok = True
            elif kind == "readinessProbe" and c.probe_ok[kind] >= probe.get("successThreshold", 1):
                c.ready = True
            return
        c.probe_ok[kind] = 0
        c.probe_fail[kind] = c.probe_fail.get(kind, 0) + 1
        self._event(pod, "Warning", "Unhealthy", f"{label} probe failed: {msg}", 10)
        if c.probe_fail[kind] < probe.get("failureThreshold", 3):
            return
        if kind == "readinessProbe":
            c.ready = False
        elif c.proc is not None:
            self._event(pod, "Normal", "Killing",
                        f"Container {c.name} failed {label.lower()} probe, will be restarted")
            containers.kill_group(c.proc, signal.SIGKILL)

    # --- lookups for the container environment -------------------------------------------

    def _lookup(self, kind: str, ns: str, name: str) -> dict | None:
        return self.app.api.store.get(CONFIGMAPS if kind == "ConfigMap" else SECRETS, ns, name)

    def resolve(self, host: str) -> str | None:
        return dns.resolve(self.hosts, host)

    def log_file(self, pod: dict, container: str | None, previous: bool) -> Path:
        return podstatus.log_file(self, pod, container, previous)
