"""What the fabric stage keeps of an nccl-test: the -J document it fetches from the node goes to
the run's records (the state store, shared by every worker) without the environment nccl-tests
writes into it, which carries whatever tokens the node or mpirun -x hold."""

from __future__ import annotations

from dataclasses import dataclass

from blueprints.schema import FabricSpec
from tasks.adapters.ssh import CommandResult, SshNode
from tasks.planning.fabric import commands as fc
from tasks.stages.fabric_exec import Runner
from tests.unit.parsing.samples import read

CANARY = "pdlift-canary-9f2c-never-stored"


@dataclass
class _Settings:
    max_parallel: int = 8


class OneH200:
    """Answers the test with the recorded H200 run and the fetch with its -J document."""

    settings = _Settings()

    def run(self, node, argv, *, timeout_s, env=None, stdin=b"", on_line=None, check=True, secrets=None):
        out = read("nccl_sendrecv_1x_h200_recorded.json") if argv[:3] == ["sh", "-c", fc.FETCH_SCRIPT] \
            else read("nccl_allreduce_1x_h200_recorded.txt")
        for line in out.splitlines():
            on_line("stdout", line)
        return CommandResult(node.name, " ".join(argv), 0, out, "", 0.01)


def test_the_fetched_document_is_kept_and_judged_without_the_environment_it_carries():
    kept = {}
    runner = Runner(OneH200(), "r1", keep=lambda test_id, ran: kept.setdefault(test_id, ran))
    node = SshNode("i-1", "10.0.0.1", ("ssh-ed25519 AAAA",), 22)
    spec = FabricSpec()
    done = runner.nccl(node, "sendrecv", "single", lambda path: fc.single_node_all_reduce(spec, path))
    assert done.result is not None and done.result.collective == "sendrecv_perf" and len(done.result.rows) == 8
    assert set(kept) == {"single", "single.json"}
    assert all(CANARY not in ran.stdout and CANARY not in ran.stderr for ran in kept.values())
    assert "left out: 3 variable(s)" in kept["single.json"].stdout
