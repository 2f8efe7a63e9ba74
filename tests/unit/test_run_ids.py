"""A run id labels the run's nodes (pdlift.io/run): a Kubernetes label value, refused before anything is bought."""

import pytest

from tasks.errors import ConfigError
from tasks.planning.fleet_swap import successor_run_id
from tasks.planning.identity import check_run_id, default_run_id


@pytest.mark.parametrize("run_id", ["a", "r1", "A.b_c-9", "x" * 63, "takeover-1a2b3c", default_run_id("{}"),
                                    successor_run_id("r1a2b3c4d5e"), successor_run_id("x" * 59)])
def test_ids_a_label_value_can_hold_and_the_ones_pdlift_derives_are_accepted(run_id):
    assert check_run_id(run_id) == run_id


@pytest.mark.parametrize("run_id", ["", "x" * 64, "-a", "a-", ".a", "a_", "my run", "a/b", "a:b", "é", "a\n"])
def test_anything_else_is_refused_naming_the_field_and_the_fix(run_id):
    with pytest.raises(ConfigError) as refused:
        check_run_id(run_id)
    assert f"run_id {run_id!r} cannot be used" in str(refused.value) and "1-63 letters" in str(refused.value)


def test_a_successor_past_63_characters_is_refused():
    with pytest.raises(ConfigError):
        check_run_id(successor_run_id("x" * 61))  # x*61 + "-f1" = 64
