"""The pairwise layer's orchestration over a FakeShell (each command mapped to its exit code and
output, at the SSH seam): the tournament's rounds, the second pass that re-pairs suspects with
known-good nodes, and the stop when a failure cannot be pinned on a node."""

from __future__ import annotations

from dataclasses import dataclass

from blueprints.schema import FabricSpec
from tasks.adapters.ssh import CommandResult
from tasks.planning.fabric import commands as fc
from tasks.stages.fabric_exec import Runner
from tasks.planning.records import Node
from tasks.stages.fabric_layers import Ctx
from tasks.stages.fabric_pairs import pairwise

SPEC = FabricSpec(test_timeout_s=5, max_pingpong_latency_us=100)
NCCL = """# nccl-tests version 2.16.9 nccl-headers=22707 nccl-library=22707
#  Rank  0 Group  0 Pid   1000 on {host} device  0 [0x53] NVIDIA H200
{host}:1000:1000 [0] NCCL INFO NET/OFI Selected Provider is efa (found 16 nics)
{host}:1000:1000 [0] NCCL INFO Using network Libfabric
{host}:1000:1000 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/Libfabric/0/GDRDMA
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
  1073741824     268435456     float     sum      -1   4607.6  233.04  {bw:.2f}      0   4565.6  235.18  {bw:.2f}      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : {bw:.2f}
"""
PINGPONG = """bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec
64      10      =10      1.2k        0.00s      1.77      16.25       0.03
256     10      =10      5k          0.00s      6.66       9.45       0.03
"""


@dataclass
class _Settings:
    max_parallel: int = 8


class FakeShell:
    """Answers like NodeShell.run: a pair's collectives fall below their floors when
    ``slow(pass tag, peer addresses)`` says so (the tag, p1 or p2, is in the -J file name)."""

    def __init__(self, slow, socket_on: str | None = None):
        self.settings, self.slow, self.commands, self.socket_on = _Settings(), slow, [], socket_on

    def run(self, node, argv, *, timeout_s, env=None, stdin=b"", on_line=None, check=True, secrets=None):
        self.commands.append((node.name, list(argv)))
        code, out, err = self._answer(node, list(argv))
        for stream, text in (("stdout", out), ("stderr", err)):
            for line in text.splitlines():
                on_line(stream, line)
        return CommandResult(node.name, " ".join(argv), code, out, err, 0.01)

    def _answer(self, node, argv):
        if argv[:2] == ["sh", "-c"] and argv[2] == fc.SERVE_SCRIPT:
            return 0, PINGPONG, "pdlift-listening 4E20"
        if argv[0] == "fi_pingpong":
            return 0, PINGPONG, ""
        if argv[0] == "mpirun":
            peers = [h.split(":")[0] for h in argv[argv.index("--host") + 1].split(",")]
            floor = {"all_reduce_perf": 300, "alltoall_perf": 60, "sendrecv_perf": 40}
            binary = next(a for a in argv if a in floor)
            tag = argv[argv.index("-J") + 1].rsplit("/", 1)[-1].split("-")[1]  # pair-p1-... / pair-p2-...
            bw = floor[binary] * (0.5 if self.slow(tag, set(peers)) else 1.3)
            text = NCCL.format(host=node.address, bw=bw)
            if self.socket_on in peers:  # NCCL fell back to TCP: fast enough, but not over EFA
                text = text.replace("Using network Libfabric", "Using network Socket").replace(
                    "via NET/Libfabric/0/GDRDMA", "via NET/Socket/0")
            return 0, text, ""
        if argv[:2] == ["sh", "-c"] and argv[2] == fc.FETCH_SCRIPT:
            return 1, "", "cat: no such file"  # no -J file: the text is parsed
        return 0, "", ""


NODES = [Node(f"i-{c}", f"10.0.0.{i}", "decode", ("ssh-ed25519 AAAA",)) for i, c in enumerate("abcd", 1)]


def _pairwise(slow, nodes=NODES, socket_on=None):
    shell = FakeShell(slow, socket_on)
    ctx = Ctx(SPEC, Runner(shell, "r"), lambda msg: None, 20000)  # type: ignore[arg-type]
    return pairwise(ctx, list(nodes)), shell


def test_a_clean_fleet_plays_the_whole_tournament_in_n_minus_one_rounds():
    layer, shell = _pairwise(lambda tag, peers: False)
    assert layer.rounds == 3 and not layer.isolate and layer.stop is None
    launched = [tuple(sorted(h.split(":")[0] for h in argv[argv.index("--host") + 1].split(",")))
                for _, argv in shell.commands if argv[0] == "mpirun"]
    assert len(set(launched)) == 6 and len(launched) == 6 * 3  # every pair, three collectives each


def test_a_single_failing_pair_is_settled_by_a_second_pass_with_known_good_partners():
    # a<->b fails in the tournament; in the second pass b fails again with a known-good node, a does not.
    def slow(tag, peers):
        return peers == {"10.0.0.1", "10.0.0.2"} if tag == "p1" else "10.0.0.2" in peers

    layer, shell = _pairwise(slow)
    assert layer.rounds == 3 + 1
    assert list(layer.isolate) == ["i-b"] and "failed again with known-good" in layer.isolate["i-b"]
    second = [r for r in layer.records if r.subject.endswith("(second pass)")]
    assert len(second) == 2 and {n for r in second for n in r.nodes} >= {"i-a", "i-b"}


def test_a_failing_pair_between_two_nodes_cannot_be_pinned_and_stops_the_stage():
    layer, _ = _pairwise(lambda tag, peers: True, NODES[:2])
    assert not layer.isolate and layer.rounds == 1
    assert "cannot be pinned on one node" in layer.stop and "i-a<->i-b" in layer.stop


def test_a_node_slow_with_every_partner_is_isolated_without_a_second_pass():
    layer, _ = _pairwise(lambda tag, peers: "10.0.0.3" in peers)
    assert list(layer.isolate) == ["i-c"] and layer.rounds == 3
    assert "failed with every partner" in layer.isolate["i-c"]


def test_pairs_whose_nccl_log_shows_sockets_instead_of_efa_fail_whatever_their_bandwidth():
    layer, _ = _pairwise(lambda tag, peers: False, socket_on="10.0.0.4")
    assert list(layer.isolate) == ["i-d"] and "fell back to TCP sockets" in layer.isolate["i-d"]
