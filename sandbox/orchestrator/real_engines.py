"""`scripts/sandbox up --real-engines`: the Kubernetes stand-in runs vLLM pods with the real CPU build.

What it adds to a plain `up` (sandbox/engines/real has the engines' side):

* a network namespace for the engines, kept by a holder process whose PID file lies under
  ``<state>/sandbox/real-engines/`` and whose argv names the state dir, so `down` stops it
  with everything else;
* ``PDLIFT_SANDBOX_REAL_ENGINES`` (the venv scripts/setup-real-engines made) and
  ``PDLIFT_SANDBOX_REAL_NETNS`` in the stand-in's environment, which passes them to its
  containers (sandbox/kube/containers.py);
* the converted real model, uploaded to S3 instead of the synthetic checkpoint (provision).
"""

from __future__ import annotations

from pathlib import Path

from sandbox.orchestrator import procs

BLUEPRINT = Path(__file__).resolve().parents[2] / "blueprints" / "sandbox-real-vllm.yaml"


class NotReady(RuntimeError):
    """The real-engine tier cannot run: not installed, or the sandbox is up without it."""


def pid_file(state_dir: Path) -> Path:
    return state_dir / "sandbox" / "real-engines" / "netns.pid"


def holder(state_dir: Path) -> int | None:
    """The live namespace holder of this sandbox, if any."""
    pid = procs.read_pid(pid_file(state_dir))
    return pid if pid and procs.belongs_to(pid, state_dir) else None


def prepare(state_dir: Path, kube_running: bool) -> dict[str, str]:
    """The environment the stand-in needs for real engines; starts the namespace holder once.

    Raises:
        NotReady: the install is missing (run scripts/setup --real-engines), or the stand-in
            already runs without real engines (run scripts/sandbox down first).
    """
    from sandbox.engines import real
    from sandbox.engines.real import netns

    missing = real.installed()
    if missing:
        raise NotReady(missing)
    pid = holder(state_dir)
    if kube_running and pid is None:
        raise NotReady("the sandbox is already up with simulated engines; `scripts/sandbox down` first")
    if pid is None:
        pid = netns.start_holder(pid_file(state_dir), marker=str(state_dir))
    return {"PDLIFT_SANDBOX_REAL_ENGINES": str(real.venv()), "PDLIFT_SANDBOX_REAL_NETNS": netns.path_of(pid)}
