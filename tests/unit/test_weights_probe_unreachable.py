"""A node that stopped answering SSH after the fabric stage passed: the weights stage says which
and how to get it replaced (the fabric stage again), not only that it failed."""

from types import SimpleNamespace

import pytest

from blueprints.schema import StagingSpec
from tasks.adapters.ssh import SshNode
from tasks.errors import RemoteUnavailable, StageFailed
from tasks.stages import weights
from tests.unit.test_staging_planning import _manifest


class Shell:
    settings = SimpleNamespace(max_parallel=4)

    def __init__(self, failures: dict[str, BaseException]):
        self.failures = failures

    def upload(self, node, local, remote, mode):
        if node.name in self.failures:
            raise self.failures[node.name]

    def run(self, node, argv, **_):
        return SimpleNamespace(stdout='{"event": "probe", "free_bytes": 10, "needed_bytes": 1, "present_bytes": 0}')


NODES = [SshNode("i-ok", "127.0.0.11"), SshNode("i-dead", "127.0.0.12")]


def test_a_node_without_ssh_is_named_with_the_way_to_replace_it():
    shell = Shell({"i-dead": RemoteUnavailable("no SSH answer at 127.0.0.12:22 after 3 attempts")})
    with pytest.raises(RemoteUnavailable) as refused:
        weights.probe(shell, NODES, _manifest(), StagingSpec(local_path="/mnt/m"))
    message = str(refused.value)
    assert "i-dead no longer answer(s) SSH" in message and "rerun: [fabric]" in message
    assert "i-ok no longer" not in message


def test_any_other_failure_gets_no_such_hint():
    shell = Shell({"i-dead": StageFailed("the stager's probe printed no result")})
    with pytest.raises(StageFailed) as refused:
        weights.probe(shell, NODES, _manifest(), StagingSpec(local_path="/mnt/m"))
    assert "rerun: [fabric]" not in str(refused.value)
