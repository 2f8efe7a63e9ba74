"""Fuzz the blueprint loader: whatever the text, it returns a Blueprint or raises ConfigError."""

from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from blueprints.loader import parse_blueprint
from blueprints.schema import Blueprint
from tasks.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
REFERENCE_TEXT = (ROOT / "blueprints" / "glm51-fp8-2p2d.yaml").read_text()
REFERENCE = yaml.safe_load(REFERENCE_TEXT)

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _loads_or_config_error(text: str) -> None:
    try:
        result = parse_blueprint(text, "fuzz.yaml")
    except ConfigError as e:
        assert str(e).startswith("fuzz.yaml"), str(e)
        return
    assert isinstance(result, Blueprint)


scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20))
documents = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=5)), max_leaves=25)


@FUZZ
@given(documents)
def test_arbitrary_yaml_documents_load_or_fail_with_config_error(doc):
    _loads_or_config_error(yaml.safe_dump(doc))


@FUZZ
@given(st.text(max_size=400))
def test_arbitrary_text_loads_or_fails_with_config_error(text):
    _loads_or_config_error(text)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, prefix + (i,))


ALL_PATHS = [p for p in _paths(REFERENCE) if p]


def _mutate(doc, path, op, value):
    import copy

    doc = copy.deepcopy(doc)
    parent = doc
    for part in path[:-1]:
        parent = parent[part]
    key = path[-1]
    if op == "delete":
        del parent[key]
    elif op == "replace":
        parent[key] = value
    elif op == "rename" and isinstance(parent, dict):
        parent[str(value)[:12] or "x"] = parent.pop(key)
    elif op == "wrap":
        parent[key] = [parent[key]]
    return doc


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(ALL_PATHS), st.sampled_from(["delete", "replace", "rename", "wrap"]),
                          scalars), min_size=1, max_size=3))
def test_random_mutations_of_the_reference_load_or_fail_with_config_error(mutations):
    doc = REFERENCE
    for path, op, value in mutations:
        try:
            doc = _mutate(doc, path, op, value)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed this path
    _loads_or_config_error(yaml.safe_dump(doc, sort_keys=False))


@FUZZ
@given(st.integers(0, len(REFERENCE_TEXT) - 1), st.text(min_size=1, max_size=8))
def test_random_text_splices_into_the_reference_load_or_fail_with_config_error(at, insert):
    _loads_or_config_error(REFERENCE_TEXT[:at] + insert + REFERENCE_TEXT[at:])


def test_deeply_nested_documents_are_a_config_error_not_a_crash():
    _loads_or_config_error("a: " + "[" * 5000 + "]" * 5000)
