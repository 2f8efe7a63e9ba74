"""The endpoint's YAML configuration: capacity per AZ, with defaults, unknown keys refused."""

from __future__ import annotations

import pytest

from sandbox.aws.config import AwsConfig, load_config


def test_a_config_file_sets_capacity_per_zone_and_keeps_the_other_defaults(tmp_path):
    path = tmp_path / "aws.yaml"
    path.write_text("capacity:\n  us-east-2a: {p5en.48xlarge: 2}\ntopology_pair_size: 4\n")
    config = load_config(path)

    assert config.pool_size("us-east-2a", "p5en.48xlarge") == 2
    assert config.pool_size("us-east-2b", "p5en.48xlarge") == 0
    assert config.topology_pair_size == 4
    assert config.capacity_blocks == AwsConfig().capacity_blocks


def test_unknown_keys_are_refused_by_name(tmp_path):
    path = tmp_path / "aws.yaml"
    path.write_text("capacty: {}\n")
    with pytest.raises(ValueError, match="capacty"):
        load_config(path)


def test_without_a_file_every_default_zone_offers_eight_p5en():
    config = load_config(None)
    assert {z: config.pool_size(z, "p5en.48xlarge") for z in config.zones()} == {
        "us-east-2a": 8, "us-east-2b": 8, "us-east-2c": 8}
