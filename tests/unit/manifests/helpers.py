"""The reference blueprint in each engine x connector variant, and ways to tamper with a render."""

from __future__ import annotations

from pathlib import Path

from blueprints.loader import load_blueprint
from blueprints.schema import Blueprint
from tasks.planning.manifests import render_stack

ROOT = Path(__file__).resolve().parents[3]
REFERENCE = load_blueprint(ROOT / "blueprints" / "glm51-fp8-2p2d.yaml")
WEIGHTS = REFERENCE.staging.local_path  # the same path tasks/stages/deploy.weights_host_path gives
COMBOS = [(e, c) for e in ("vllm", "sglang") for c in ("mooncake", "nixl")]


def variant(bp: Blueprint = REFERENCE, *, engine: dict | None = None, kv: dict | None = None,
            topology: dict | None = None, model: dict | None = None) -> Blueprint:
    """A copy with fields replaced, bypassing the loader's rules (the invariants are the net here)."""
    update: dict = {}
    if engine:
        update["engine"] = bp.engine.model_copy(update=engine)
    if kv:
        update["kv_transfer"] = bp.kv_transfer.model_copy(update=kv)
    if topology:
        update["topology"] = bp.topology.model_copy(update=topology)
    if model:
        update["model"] = bp.model.model_copy(update=model)
    return bp.model_copy(update=update)


def combo(engine: str, connector: str, **kv) -> Blueprint:
    return variant(engine={"name": engine}, kv={"connector": connector, **kv})


def render(bp: Blueprint = REFERENCE, colour: str = "blue") -> list[dict]:
    return render_stack(bp, colour, WEIGHTS)


def find(objects: list[dict], kind: str, name: str) -> dict:
    return next(o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name)


def template(objects: list[dict], lws: str, which: str = "leaderTemplate") -> dict:
    return find(objects, "LeaderWorkerSet", lws)["spec"]["leaderWorkerTemplate"][which]


def engine_container(objects: list[dict], lws: str, which: str = "leaderTemplate") -> dict:
    return template(objects, lws, which)["spec"]["containers"][0]


def edit_script(container: dict, old: str, new: str) -> None:
    assert old in container["args"][0], old
    container["args"][0] = container["args"][0].replace(old, new)
