"""Real engines for the sandbox's real-engine tier: vLLM's CPU build with NIXL over UCX tcp, on a
real small model, standing in for the simulated engines (``launch``), with the GPU-only flags
mapped by one table (``flags``) and the engines in a network namespace of their own (``netns``).
Installed by scripts/setup-real-engines under ``<state dir>/real-engines``."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]


def home() -> Path:
    """Where scripts/setup-real-engines put the venv and the model: ``$PDLIFT_REAL_ENGINES_HOME``,
    else ``<state dir>/real-engines`` (a sandbox in a state dir of its own can name the one install)."""
    if os.environ.get("PDLIFT_REAL_ENGINES_HOME"):
        return Path(os.environ["PDLIFT_REAL_ENGINES_HOME"]).resolve()
    state = os.environ.get("PDLIFT_STATE_DIR") or str(REPO_ROOT / ".pdlift")
    return Path(state).resolve() / "real-engines"


def venv() -> Path:
    return home() / "venv"


def model_dir() -> Path:
    return home() / "models" / "smollm2-135m"


def installed() -> str | None:
    """None when the real-engine tier is installed, else what is missing."""
    for stamp in (venv() / ".pdlift-installed", model_dir() / ".pdlift-converted"):
        if not stamp.exists():
            return f"{stamp} is missing: run scripts/setup --real-engines"
    return None
