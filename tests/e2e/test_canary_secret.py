"""An SSH key encrypted with a passphrase: opened with the passphrase from the variable the
blueprint's aws.ssh.key_passphrase_env names, and a missing or wrong one is a config error that
names the variable, never the value.

The canary secret's whole migrate (a recognisable AWS secret key and SSH key passphrase through
every stage, then a run with a wrong secret, and afterwards neither anywhere pdlift or Prefect keeps
things) is the demo's run: tests/e2e/test_demo.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.canary import CANARY_PASSPHRASE, PASSPHRASE_ENV, PREFIX, WRONG_SECRET, encrypted_copy


def _encrypted_key(tmp_path: Path) -> Path:
    from cryptography.hazmat.primitives import serialization as ser
    from cryptography.hazmat.primitives.asymmetric import ed25519

    plain = tmp_path / "plain"
    plain.write_bytes(ed25519.Ed25519PrivateKey.generate().private_bytes(
        ser.Encoding.PEM, ser.PrivateFormat.OpenSSH, ser.NoEncryption()))
    return encrypted_copy(plain, tmp_path / "encrypted")


def test_an_encrypted_key_is_opened_with_the_passphrase_from_the_variable_the_blueprint_names(tmp_path):
    from blueprints.schema import SshSpec
    from tasks.adapters.ssh_connect import Connector, SshSettings

    key = _encrypted_key(tmp_path)
    spec = SshSpec(user="root", key_pair="k", key_file=str(key), key_passphrase_env=PASSPHRASE_ENV)
    settings = SshSettings.from_spec(spec, environ={PASSPHRASE_ENV: CANARY_PASSPHRASE})
    assert settings.key_passphrase == CANARY_PASSPHRASE and PREFIX not in repr(settings)
    assert Connector(settings)._pkey.get_name() == "ssh-ed25519"


@pytest.mark.parametrize("environ, named, says", [
    ({}, PASSPHRASE_ENV, f"is encrypted: ${PASSPHRASE_ENV} (aws.ssh.key_passphrase_env) is not set"),
    ({PASSPHRASE_ENV: WRONG_SECRET}, PASSPHRASE_ENV, f"(or ${PASSPHRASE_ENV} is not its passphrase)"),
    ({}, None, "is encrypted: name the variable that holds its passphrase in aws.ssh.key_passphrase_env"),
])
def test_a_missing_or_wrong_passphrase_is_a_config_error_that_names_the_variable_not_the_value(
        tmp_path, environ, named, says):
    from blueprints.schema import SshSpec
    from tasks.adapters.ssh_connect import Connector, SshSettings
    from tasks.errors import ConfigError

    spec = SshSpec(user="root", key_pair="k", key_file=str(_encrypted_key(tmp_path)), key_passphrase_env=named)
    with pytest.raises(ConfigError) as info:
        Connector(SshSettings.from_spec(spec, environ=environ))
    assert says in str(info.value) and PREFIX not in str(info.value)
