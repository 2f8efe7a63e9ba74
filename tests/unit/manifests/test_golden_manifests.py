"""The rendered stack of the reference blueprint, for each engine x connector, matches its golden file.

The golden files under tests/fixtures/golden/ are the review copy of what pdlift applies: read
a diff there as you would a change to production manifests. After an intentional change,
regenerate them with

    PDLIFT_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/unit/manifests -q

and review the diff before committing.
"""

from __future__ import annotations

import os

import pytest
import yaml

from tasks.planning.manifests import render_production_service, to_yaml
from tests.unit.manifests.helpers import COMBOS, REFERENCE, ROOT, combo, render

GOLDEN = ROOT / "tests" / "fixtures" / "golden"
UPDATE = os.environ.get("PDLIFT_UPDATE_GOLDEN") == "1"


def _compare(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.write_text(text)
    assert path.exists(), f"{path} is missing; run with PDLIFT_UPDATE_GOLDEN=1 to create it"
    assert text == path.read_text(), f"{name} differs from the render; if intended, regenerate (see module doc)"


@pytest.mark.parametrize("engine,connector", COMBOS)
def test_the_rendered_stack_matches_its_golden_file(engine, connector):
    _compare(f"stack-{engine}-{connector}.yaml", to_yaml(render(combo(engine, connector))))


def test_the_production_service_matches_its_golden_file():
    _compare("production-service.yaml", to_yaml([render_production_service(REFERENCE, "blue")]))


def test_golden_files_are_yaml_that_round_trips_to_the_render():
    objects = render(combo("vllm", "mooncake"))
    assert list(yaml.safe_load_all((GOLDEN / "stack-vllm-mooncake.yaml").read_text())) == objects
