"""Under CI=true a missing prerequisite fails the test; elsewhere it skips (tests/fixtures/strict.py).
And a sandbox component whose package is broken is an error, not "not built"."""

from __future__ import annotations

import pytest
from _pytest.outcomes import Failed, Skipped

from sandbox.orchestrator.components import module_exists
from tests.fixtures.strict import import_or_missing, missing

REASON = "sandbox component 'aws' is not built yet"


@pytest.mark.parametrize("value", ["true", "TRUE", "1"])
def test_under_ci_a_missing_prerequisite_fails_with_its_reason(monkeypatch, value):
    monkeypatch.setenv("CI", value)
    with pytest.raises(Failed, match=REASON):
        missing(REASON)
    with pytest.raises(Failed, match="no_such_module_for_pdlift"):
        import_or_missing("no_such_module_for_pdlift.sub")


@pytest.mark.parametrize("value", [None, "", "false", "0"])
def test_outside_ci_a_missing_prerequisite_skips_with_its_reason(monkeypatch, value):
    if value is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", value)
    with pytest.raises(Skipped, match=REASON):
        missing(REASON)
    with pytest.raises(Skipped, match="no_such_module_for_pdlift"):
        import_or_missing("no_such_module_for_pdlift")


def test_a_module_that_is_there_imports_and_one_that_breaks_is_not_called_missing(monkeypatch, tmp_path):
    monkeypatch.setenv("CI", "true")
    assert import_or_missing("json").dumps(1) == "1"
    broken = tmp_path / "pdlift_broken_pkg"
    broken.mkdir()
    (broken / "__init__.py").write_text("import pdlift_dependency_that_is_not_installed\n")
    (broken / "mod.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError, match="pdlift_dependency_that_is_not_installed"):
        import_or_missing("pdlift_broken_pkg.mod")


def test_built_is_false_for_an_absent_component_and_raises_for_a_broken_package(monkeypatch, tmp_path):
    assert module_exists("sandbox.orchestrator.components")() is True
    assert module_exists("sandbox.no_such_component.__main__")() is False
    assert module_exists("no_such_package_for_pdlift.__main__")() is False
    for name, init in (("pdlift_broken_dep", "import pdlift_dependency_that_is_not_installed\n"),
                       ("pdlift_broken_import", "from .absent_submodule import thing\n"),
                       ("pdlift_broken_code", "raise RuntimeError('broken on purpose')\n")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(init)
        (tmp_path / name / "__main__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError, match="pdlift_dependency_that_is_not_installed"):
        module_exists("pdlift_broken_dep.__main__")()
    with pytest.raises(ImportError, match="absent_submodule"):
        module_exists("pdlift_broken_import.__main__")()
    with pytest.raises(RuntimeError, match="broken on purpose"):
        module_exists("pdlift_broken_code.__main__")()
