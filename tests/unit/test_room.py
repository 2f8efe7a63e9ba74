"""Room for the candidate colour beside the live one, from the rendered stack and the fleet's GPUs."""

from __future__ import annotations

from pathlib import Path

from blueprints.loader import load_blueprint
from tasks.planning.manifests import render_stack
from tasks.planning.room import FleetNode, GpuPod, Need, needs, shortfalls

REFERENCE = Path(__file__).resolve().parents[2] / "blueprints" / "glm51-fp8-2p2d.yaml"
NODES = [FleetNode(f"n{i}", role, 8) for i, role in enumerate(["prefill", "prefill", "decode", "decode"])]


def _blue_on(nodes: list[FleetNode]) -> list[GpuPod]:
    return [GpuPod("glm-blue", f"{n.role}-{i}", n.name, 8) for i, n in enumerate(nodes)]


def test_the_reference_stack_asks_two_whole_nodes_per_role():
    objects = render_stack(load_blueprint(str(REFERENCE)), "green", "/models/GLM-5.1-FP8")
    assert needs(objects) == [Need("decode", 2, 8), Need("prefill", 2, 8)]


def test_a_fleet_the_live_colour_fills_has_no_room_and_says_who_holds_the_gpus():
    wanted = [Need("decode", 2, 8), Need("prefill", 2, 8)]
    short = shortfalls(wanted, NODES, _blue_on(NODES), "glm-green")
    assert len(short) == 2
    assert short[1].startswith("prefill: 2 pod(s) of 8 GPUs wanted, room for 0 on 2 prefill node(s)")
    assert "n0: 8 of 8 GPUs held by glm-blue/prefill-0" in short[1]


def test_a_second_set_of_nodes_makes_room():
    spare = [FleetNode(f"m{i}", n.role, 8) for i, n in enumerate(NODES)]
    assert shortfalls([Need("decode", 2, 8), Need("prefill", 2, 8)], NODES + spare, _blue_on(NODES), "glm-green") == []


def test_half_a_role_free_is_not_enough():
    pods = _blue_on(NODES[:1])   # one prefill node busy, the other free
    [line] = shortfalls([Need("prefill", 2, 8)], NODES, pods, "glm-green")
    assert "room for 1" in line


def test_the_candidates_own_old_pods_do_not_count_as_taken():
    stale = [GpuPod("glm-green", f"old-{i}", n.name, 8) for i, n in enumerate(NODES)]
    assert shortfalls([Need("decode", 2, 8), Need("prefill", 2, 8)], NODES, stale, "glm-green") == []
