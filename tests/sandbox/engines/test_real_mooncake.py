"""The real Mooncake Transfer Engine (PyPI mooncake-transfer-engine-non-cuda, the real-engine venv)
moves the canary's KV bytes between two processes over tcp, and the canary's log reader is held to
the lines it really prints.

vLLM's MooncakeConnector does not run on the CPU build: its worker starts with
``torch.accelerator.current_device_index()`` (vllm/distributed/kv_transfer/kv_connector/v1/mooncake/
mooncake_connector.py), which CPU torch answers with "Cannot access accelerator device when none is
available" (checked in the real-engine venv; the sandbox's flag table refuses the connector for that
reason). So the pair here is the Transfer Engine alone, as the connector drives it: P2PHANDSHAKE,
registered DRAM, a synchronous write, then a read back.

Selected only by `scripts/test --real-engines` (marker ``real_engines``).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from blueprints.loader import load_blueprint
from sandbox.engines import real
from sandbox.engines.real import netns
from tasks.planning import canary
from tasks.planning.capacity_math import kv_bytes_per_token

pytestmark = [pytest.mark.real_engines, pytest.mark.timeout(600)]
REPO = Path(__file__).resolve().parents[3]
PAIR = REPO / "sandbox" / "engines" / "real" / "mooncake_pair.py"
BLUEPRINT = REPO / "blueprints" / "sandbox-real-vllm.yaml"


@pytest.fixture(scope="module")
def namespace(tmp_path_factory):
    missing = real.installed()
    if missing:
        pytest.fail(f"the real-engine tier is not installed: {missing}")
    pid = netns.start_holder(tmp_path_factory.mktemp("netns") / "netns.pid")
    yield netns.path_of(pid)
    netns.stop_holder(pid)


def test_the_transfer_engine_moves_the_canarys_kv_over_tcp_and_the_canary_reads_its_log_as_tcp(namespace, tmp_path):
    bp = load_blueprint(BLUEPRINT)
    size = int(canary.canary_tokens(bp.model.max_context) * kv_bytes_per_token(bp.model, bp.engine.kv_cache_dtype))
    python = str(real.venv() / "bin" / "python")
    logs = {side: tmp_path / f"{side}.log" for side in ("target", "initiator")}
    with open(logs["target"], "wb") as target_log:
        target = subprocess.Popen(netns.command_inside(namespace, [python, str(PAIR), "target", str(size)]),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=target_log, text=True)
        try:
            ready = target.stdout.readline().split()
            assert ready[:1] == ["READY"], logs["target"].read_text()
            peer, address = ready[1], ready[2]
            with open(logs["initiator"], "wb") as initiator_log:
                initiator = subprocess.run(netns.command_inside(namespace, [python, str(PAIR), "initiator", peer,
                                                                            address, str(size)]),
                                           stdout=subprocess.PIPE, stderr=initiator_log, text=True, timeout=300)
            target.stdin.write("done\n")
            target.stdin.flush()
            landed = target.stdout.readline().split()
            assert target.wait(timeout=60) == 0
        finally:
            if target.poll() is None:
                target.kill()
    out = initiator.stdout
    assert initiator.returncode == 0, out + logs["initiator"].read_text()
    assert "WRITE rc=0" in out and "READ rc=0 equal=True" in out
    assert landed[:2] == ["TARGET", "sha256"] and f"INITIATOR sha256 {landed[2]}" in out  # the bytes arrived
    seconds = float(out.split("WRITE rc=0 ", 1)[1].split()[0])
    print(f"\nMooncake TE over tcp: {size / 1e6:.1f} MB (the canary's KV) written in {seconds:.3f} s")

    text = logs["target"].read_text() + logs["initiator"].read_text()
    # What this wheel really logs (real-parts.md); the canary's reader must know these lines.
    assert "Transfer Engine RPC using P2P handshake" in text and "TcpTransport: listen on port" in text
    transport, problem = canary.transport_in_log("mooncake", text)
    assert transport == "tcp" and "mooncake-transfer-engine-efa" in problem
