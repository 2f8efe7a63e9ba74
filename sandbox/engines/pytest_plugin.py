"""Pytest fixtures for sandbox engines (registered in tests/conftest.py).

``engine_launcher`` (per test) and ``module_engine_launcher`` (per module) give a
``harness.Launcher`` with a private state dir; every engine it started is stopped by PID (its
process group) at teardown. Build PD stacks on them with ``sandbox.engines.stacks``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox.engines.harness import Launcher


@pytest.fixture
def engine_launcher(tmp_path: Path):
    launcher = Launcher(tmp_path)
    yield launcher
    launcher.stop_all()


@pytest.fixture(scope="module")
def module_engine_launcher(tmp_path_factory: pytest.TempPathFactory):
    launcher = Launcher(tmp_path_factory.mktemp("engines"))
    yield launcher
    launcher.stop_all()
