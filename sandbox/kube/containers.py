"""What a container runs in the sandbox: its environment, its command line, its process.

* Engines (``vllm serve``, ``python -m vllm.entrypoints.openai.api_server``,
  ``python -m sglang.launch_server``, ``vllm-router``, ``python -m sglang_router.launch_router``,
  ``mooncake_master``, ``dcgm-exporter``) run as ``python -m sandbox.engines -- <command...> <args...>``
  (contract 3); so does ``sh -c SCRIPT`` when SCRIPT runs one of them.
* Small test commands (``python``/``python3`` (this interpreter), ``sh``, ``bash``, ``sleep``,
  ``echo``, ``true``, ``false``) run as they are.
* Anything else has no stand-in: the container idles (it runs, logs one line saying so, and
  has no HTTP endpoint, so an httpGet probe on it fails, as it should).

Environment: the container's ``env``/``envFrom`` (values, ``$(VAR)`` references, fieldRef,
resourceFieldRef, configMap and secret keys) plus ``PDLIFT_SANDBOX_BIND`` (the node address the
process must listen on), ``POD_IP``, ``HOSTNAME``, ``PDLIFT_SANDBOX_POD`` (ns/name) and
``PDLIFT_SANDBOX_NAMESPACE``, ``PDLIFT_SANDBOX_NODE``, ``PDLIFT_SANDBOX_CONTAINER`` and
``PDLIFT_SANDBOX_GPUS`` (its nvidia.com/gpu limit), and ``PDLIFT_SANDBOX_MOUNTS`` (JSON: each
volumeMount whose hostPath lies on the node's NVMe, as the directory of this machine that holds
that node's NVMe: ``<state>/sandbox/nodes/<instance>/nvme``, where the stager put the weights).
When the stand-in itself runs with ``PDLIFT_SANDBOX_REAL_ENGINES`` and
``PDLIFT_SANDBOX_REAL_NETNS`` (``scripts/sandbox up --real-engines``), its containers get them
too, and vLLM commands run the real CPU build (sandbox/engines/real). The sandbox has no cluster DNS:
``LWS_LEADER_ADDRESS`` is resolved to the leader's node address before the worker starts, and
other pod/Service names are in ``<state>/sandbox/hosts.json`` (see ``dns``), which the
engines read.
"""

from __future__ import annotations

import base64
import ctypes
import json
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from sandbox.kube.config import REPO_ROOT

ENGINE_PREFIXES = [("vllm", "serve"), ("python", "-m", "vllm.entrypoints.openai.api_server"),
                   ("python", "-m", "sglang.launch_server"), ("vllm-router",),
                   ("python", "-m", "vllm_router.app"), ("python", "-m", "sglang_router.launch_router"),
                   ("mooncake_master",), ("dcgm-exporter",)]
# Where the EKS AMI mounts a node's instance-store NVMe (setup-local-disks raid0, the blueprint's
# staging.local_path lies under it); sandbox nodes keep it as <node dir>/nvme.
NVME_MOUNT = "/mnt/k8s-disks/0"
# Set on the stand-in by `scripts/sandbox up --real-engines`; passed on to every container.
REAL_ENGINE_VARIABLES = ("PDLIFT_SANDBOX_REAL_ENGINES", "PDLIFT_SANDBOX_REAL_NETNS")
TEST_COMMANDS = {"python", "sh", "bash", "sleep", "echo", "true", "false"}
_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
_SHELL_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


class NotReadyToStart(Exception):
    """The container cannot start yet; ``reason`` becomes its waiting reason."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason, self.message = reason, message


def expand(text: str, env: dict) -> str:
    """Kubernetes ``$(VAR)`` expansion: unknown references stay as written, ``$$`` is ``$``."""
    def sub(m):
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))
    return _VAR_REF.sub(sub, text)


def _norm(word: str) -> str:
    base = os.path.basename(word)
    return "python" if re.fullmatch(r"python(3(\.\d+)?)?", base) else base


def is_engine(argv: list[str]) -> bool:
    words = [_norm(argv[0])] + argv[1:] if argv else []
    return any(tuple(words[:len(p)]) == p for p in ENGINE_PREFIXES)


def _engine_in_script(script: str, env: dict) -> list[str] | None:
    script = _SHELL_VAR.sub(lambda m: env.get(m.group(1) or m.group(2), ""), script)
    script = script.replace("\\\n", " ").replace("\n", ";")  # newlines separate commands
    lexer = shlex.shlex(script, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    segment: list[str] = []
    try:
        tokens = list(lexer) + [";"]
    except ValueError:
        return None
    for tok in tokens:
        if tok and set(tok) <= set(";&|"):
            while segment and (segment[0] == "exec" or "=" in segment[0]):
                segment = segment[1:]
            if is_engine(segment):
                return segment
            segment = []
        else:
            segment.append(tok)
    return None


def command_line(container: dict, env: dict) -> tuple[str, list[str]]:
    """Return (kind, argv) with kind one of engine | test | idle."""
    argv = [expand(str(a), env) for a in (container.get("command") or []) + (container.get("args") or [])]
    if is_engine(argv):
        return "engine", [sys.executable, "-m", "sandbox.engines", "--"] + argv
    if len(argv) >= 3 and _norm(argv[0]) in ("sh", "bash") and argv[1] == "-c" \
            and _engine_in_script(argv[2], env):
        # The engine launcher runs the script in a real shell with the engines shimmed.
        return "engine", [sys.executable, "-m", "sandbox.engines", "--"] + argv
    if argv and _norm(argv[0]) in TEST_COMMANDS:
        return "test", ([sys.executable] if _norm(argv[0]) == "python" else argv[:1]) + argv[1:]
    what = shlex.join(argv) if argv else f"the entrypoint of image {container.get('image')}"
    note = f"sandbox: {what} has no stand-in; this container idles"
    return "idle", [sys.executable, "-c",
                    f"import signal; print({note!r}, flush=True); signal.pause()"]


def _field(pod: dict, path: str, node_address: str):
    meta = pod["metadata"]
    m = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
    if m:
        return (meta.get(m.group(1)) or {}).get(m.group(2), "")
    return {"metadata.name": meta["name"], "metadata.namespace": meta.get("namespace", ""),
            "metadata.uid": meta.get("uid", ""), "spec.nodeName": pod["spec"].get("nodeName", ""),
            "spec.serviceAccountName": pod["spec"].get("serviceAccountName", ""),
            "status.hostIP": node_address, "status.podIP": node_address,
            "status.hostIPs": node_address, "status.podIPs": node_address}.get(path, "")


def _resource_field(container: dict, ref: dict) -> str:
    section, _, res = (ref.get("resource") or "").partition(".")
    value = ((container.get("resources") or {}).get(section) or {}).get(res)
    return str(value) if value is not None else "0"


def container_env(pod: dict, container: dict, node_address: str, lookup, resolve) -> dict:
    """``lookup(kind, ns, name)`` returns a ConfigMap/Secret or None; ``resolve(host)`` maps a
    cluster DNS name to an address or None."""
    ns = pod["metadata"].get("namespace", "default")
    env: dict[str, str] = {}

    def source(kind: str, ref: dict) -> dict:
        obj = lookup(kind, ns, ref.get("name", ""))
        if obj is None:
            if ref.get("optional"):
                return {}
            raise NotReadyToStart("CreateContainerConfigError",
                                  f'{kind.lower()} "{ref.get("name")}" not found')
        data = obj.get("data") or {}
        if kind == "Secret":
            return {k: base64.b64decode(v).decode(errors="replace") for k, v in data.items()}
        return dict(data)

    for ef in container.get("envFrom") or []:
        prefix = ef.get("prefix", "")
        if ef.get("configMapRef"):
            env.update({prefix + k: v for k, v in source("ConfigMap", ef["configMapRef"]).items()})
        if ef.get("secretRef"):
            env.update({prefix + k: v for k, v in source("Secret", ef["secretRef"]).items()})
    for e in container.get("env") or []:
        name, vf = e["name"], e.get("valueFrom")
        if vf is None:
            env[name] = expand(str(e.get("value", "")), env)
        elif vf.get("fieldRef"):
            env[name] = str(_field(pod, vf["fieldRef"].get("fieldPath", ""), node_address))
        elif vf.get("resourceFieldRef"):
            env[name] = _resource_field(container, vf["resourceFieldRef"])
        elif vf.get("configMapKeyRef") or vf.get("secretKeyRef"):
            kind = "ConfigMap" if vf.get("configMapKeyRef") else "Secret"
            ref = vf.get("configMapKeyRef") or vf.get("secretKeyRef")
            data = source(kind, ref)
            if ref.get("key") not in data and not ref.get("optional"):
                raise NotReadyToStart("CreateContainerConfigError",
                                      f'couldn\'t find key {ref.get("key")} in {kind} {ns}/{ref.get("name")}')
            env[name] = data.get(ref.get("key"), "")
    if "LWS_LEADER_ADDRESS" in env:
        address = resolve(env["LWS_LEADER_ADDRESS"])
        if address is None:
            raise NotReadyToStart("ContainerCreating", "waiting for the group leader's address")
        env["LWS_LEADER_ADDRESS"] = address
    return env


def _gpus(container: dict) -> int:
    """The GPUs the device plugin would hand this container: its nvidia.com/gpu limit (or request)."""
    resources = container.get("resources") or {}
    value = (resources.get("limits") or {}).get("nvidia.com/gpu", (resources.get("requests") or {}).get("nvidia.com/gpu"))
    try:
        return int(str(value)) if value is not None else 0
    except ValueError:
        return 0


def host_mounts(pod: dict, container: dict, node_dir: Path | None) -> dict[str, str]:
    """Container path -> directory here, for each of ``container``'s volumeMounts whose volume is a
    hostPath on the node's NVMe (``NVME_MOUNT``, where the EKS AMI mounts the instance store and the
    stager writes); ``node_dir``: the node's sandbox directory (None: not a sandbox node)."""
    if node_dir is None:
        return {}
    volumes = {v.get("name"): (v.get("hostPath") or {}).get("path") for v in pod["spec"].get("volumes") or []}
    out = {}
    for mount in container.get("volumeMounts") or []:
        path = volumes.get(mount.get("name"))
        if not path or not (path == NVME_MOUNT or path.startswith(NVME_MOUNT + "/")):
            continue
        here = Path(node_dir) / "nvme" / path[len(NVME_MOUNT):].strip("/")
        sub = (mount.get("subPath") or "").strip("/")
        out[mount["mountPath"]] = str(here / sub if sub else here).rstrip("/")
    return out


def process_env(pod: dict, env: dict, node_address: str, state_dir: Path, container: dict | None = None,
                mounts: dict[str, str] | None = None) -> dict:
    base = {k: os.environ[k] for k in ("PATH", "LANG", "LC_ALL", "HOME", "TMPDIR", *REAL_ENGINE_VARIABLES)
            if k in os.environ}
    base.update({"PYTHONPATH": str(REPO_ROOT), "DO_NOT_TRACK": "1", "PYTHONUNBUFFERED": "1",
                 "PDLIFT_STATE_DIR": str(state_dir), "HOSTNAME": pod["metadata"]["name"],
                 "POD_IP": node_address})
    base.update(env)
    base.update({"PDLIFT_SANDBOX_BIND": node_address,
                 "PDLIFT_SANDBOX_NAMESPACE": pod["metadata"].get("namespace", ""),
                 "PDLIFT_SANDBOX_POD": f"{pod['metadata'].get('namespace')}/{pod['metadata']['name']}",
                 "PDLIFT_SANDBOX_NODE": pod["spec"].get("nodeName", ""),
                 # What the GPU device plugin and the DCGM exporter's pod mapping know of it.
                 "PDLIFT_SANDBOX_CONTAINER": (container or {}).get("name", ""),
                 "PDLIFT_SANDBOX_GPUS": str(_gpus(container or {})),
                 "PDLIFT_SANDBOX_MOUNTS": json.dumps(mounts or {}, sort_keys=True)})
    return base


try:  # resolved here, not in the forked child, where loading a library could deadlock
    _PRCTL = ctypes.CDLL("libc.so.6", use_errno=True).prctl
except (OSError, AttributeError):
    _PRCTL = None


def _die_with_parent() -> None:
    # The container must not outlive the API server that owns it (even on SIGKILL).
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def spawn(argv: list[str], env: dict, log_path: Path, cwd: Path) -> subprocess.Popen:
    """Start the container process in its own process group (so it can be killed whole),
    stdout and stderr appended to its log file."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cwd.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(argv, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                preexec_fn=_die_with_parent)


def signal_main(proc: subprocess.Popen, sig: int) -> None:
    """``sig`` to the container's main process only."""
    try:
        proc.send_signal(sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_group(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
