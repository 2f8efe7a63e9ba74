"""The mutation campaign compiles the venv's packages to bytecode once per install
(scripts/bench/mutation.py ``compile_site_packages``): scripts/setup no longer does, and every
test process of the campaign runs with PYTHONDONTWRITEBYTECODE, so none would keep what it compiled."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "scripts" / "bench"


def _load_mutation():
    sys.path.insert(0, str(BENCH))  # mutation.py imports its sibling peers.py by name
    spec = importlib.util.spec_from_file_location("bench_mutation_under_test", BENCH / "mutation.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


mutation = _load_mutation()


def _compiled(site: Path) -> bool:
    return any((site / "__pycache__").glob("mod.*.pyc"))


def test_the_venv_is_compiled_once_per_install_and_again_after_a_new_install(tmp_path, monkeypatch):
    venv, site = tmp_path / "venv", tmp_path / "site-packages"
    venv.mkdir()
    site.mkdir()
    (site / "mod.py").write_text("VALUE = 1\n")
    installed = venv / ".pdlift-installed"
    installed.touch()
    os.utime(installed, (1_000_000, 1_000_000))
    monkeypatch.setattr(sys, "prefix", str(venv))
    monkeypatch.setattr(mutation, "repo_site_packages", lambda: [str(site)])

    mutation.compile_site_packages()
    assert _compiled(site), "a fresh install was not compiled"
    assert (venv / ".pdlift-compiled").exists()

    for pyc in (site / "__pycache__").glob("*.pyc"):
        pyc.unlink()
    mutation.compile_site_packages()
    assert not _compiled(site), "compiled again although this install was already compiled"

    # scripts/setup installed again (its stamp touched now): compiled again
    os.utime(installed, None)
    os.utime(venv / ".pdlift-compiled", (1_000_000, 1_000_000))
    mutation.compile_site_packages()
    assert _compiled(site), "a new install was not compiled"


def test_a_venv_installed_at_the_same_second_as_its_compile_is_not_compiled_again(tmp_path, monkeypatch):
    venv, site = tmp_path / "venv", tmp_path / "site-packages"
    venv.mkdir()
    site.mkdir()
    (site / "mod.py").write_text("VALUE = 1\n")
    for stamp in (".pdlift-installed", ".pdlift-compiled"):
        (venv / stamp).touch()
        os.utime(venv / stamp, (2_000_000, 2_000_000))
    monkeypatch.setattr(sys, "prefix", str(venv))
    monkeypatch.setattr(mutation, "repo_site_packages", lambda: [str(site)])
    mutation.compile_site_packages()
    assert not _compiled(site)
