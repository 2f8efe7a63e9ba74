"""Every kind of bad blueprint gets one located message with a hint, never a traceback."""

from pathlib import Path

import pytest

from blueprints.loader import load_blueprint, parse_blueprint
from tasks.errors import BlueprintError, ConfigError

ROOT = Path(__file__).resolve().parents[2]
REFERENCE_TEXT = (ROOT / "blueprints" / "glm51-fp8-2p2d.yaml").read_text()


def _error(text: str) -> BlueprintError:
    with pytest.raises(BlueprintError) as info:
        parse_blueprint(text, "bp.yaml")
    return info.value


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_both_shipped_blueprints_load():
    for name in ("glm51-fp8-2p2d.yaml", "sandbox-2p2d.yaml"):
        bp = load_blueprint(ROOT / "blueprints" / name)
        assert bp.node_count == 4


def test_yaml_syntax_error_names_file_line_and_column():
    err = _error("apiVersion: pdlift/v1\nname: [unclosed\n")
    (p,) = err.problems
    assert p.file == "bp.yaml" and p.line == 3
    assert "YAML syntax error" in str(err)


def test_unknown_key_suggests_the_closest_valid_name():
    text = REFERENCE_TEXT.replace("    kv_lora_rank: 512", "    kv_lora_rnk: 512")
    err = _error(text)
    unknown = next(p for p in err.problems if "unknown key" in p.message)
    assert unknown.field == "model.attention.kv_lora_rnk"
    assert unknown.line == _line_of(text, "kv_lora_rnk")
    assert unknown.hint == "did you mean 'kv_lora_rank'?"


def test_missing_field_points_at_its_parent_and_says_what_to_add():
    text = REFERENCE_TEXT.replace("  security_group: sg-0efa0efa0efa0efa0\n", "")
    (p,) = _error(text).problems
    assert p.field == "aws.security_group"
    assert p.message == "required field is missing"
    assert "add 'security_group:' under aws" in p.hint
    assert p.line == _line_of(text, "  region: us-east-2")


def test_wrong_type_names_field_and_shows_the_value():
    text = REFERENCE_TEXT.replace("prefill: {nodes: 2, tp: 8, pp: 2}", "prefill: {nodes: two, tp: 8, pp: 2}")
    (p,) = _error(text).problems
    assert p.field == "topology.prefill.nodes"
    assert "integer" in p.message and "'two'" in p.hint
    assert p.line == _line_of(text, "nodes: two")


def test_invalid_choice_lists_the_valid_ones():
    (p,) = _error(REFERENCE_TEXT.replace("connector: mooncake", "connector: mooncak")).problems
    assert p.field == "kv_transfer.connector"
    assert "'mooncake'" in p.hint and "'nixl'" in p.hint


def test_duplicate_keys_are_refused_instead_of_silently_keeping_the_last():
    text = REFERENCE_TEXT.replace("  dtype: fp8\n", "  dtype: fp8\n  dtype: bf16\n", 1)
    (p,) = _error(text).problems
    assert p.field == "model.dtype" and "twice" in p.message


def test_top_level_that_is_not_a_mapping_is_refused():
    assert "expected a mapping" in str(_error("- just\n- a list\n"))
    assert "got empty" in str(_error(""))


def test_unreadable_and_non_utf8_files_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="cannot read file"):
        load_blueprint(tmp_path / "missing.yaml")
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_blueprint(binary)


def test_python_tags_are_not_executed_by_the_safe_loader(tmp_path):
    err = _error("!!python/object/apply:os.system ['echo pwned']\n")
    assert "YAML" in str(err)


def test_the_message_is_file_line_column_field_message_hint():
    text = REFERENCE_TEXT.replace("connector: mooncake", "connector: mooncak")
    line = _line_of(text, "connector: mooncak")
    assert str(_error(text)).startswith(f"bp.yaml:{line}:14: kv_transfer.connector: Input should be")


def test_an_attention_kind_that_is_neither_mla_nor_gqa_says_which_to_set():
    text = REFERENCE_TEXT.replace("    kind: mla", "    kind: mha", 1)
    (p,) = _error(text).problems
    assert p.field == "model.attention"
    assert "'mha'" in p.message and p.hint == "set 'kind' to mla or gqa"


def test_an_unknown_key_in_a_baseline_point_is_located_and_refused():
    # A baseline point sits under a scenario name the blueprint chose (a mapping key, not a field),
    # so there are no field names to suggest: the hint is to remove it.
    text = REFERENCE_TEXT.replace("      - {concurrency: 64, completed: 4000, ttft_ms_mean: 1450,",
                                  "      - {concurrency: 64, completed: 4000, ttft_ms_maen: 1450,", 1)
    missing, unknown = _error(text).problems
    assert missing.field == "baseline.scenarios.isl-3k[0].ttft_ms_mean" and missing.message == "required field is missing"
    assert unknown.field == "baseline.scenarios.isl-3k[0].ttft_ms_maen"
    assert unknown.message == "unknown key 'ttft_ms_maen'" and unknown.hint == "remove it"
    assert unknown.line == _line_of(text, "ttft_ms_maen")
