"""What one fabric validation pass runs, and the units its progress counts. Pure.

    layers_for   the layers of a pass over N nodes (pairwise from two nodes, the whole set from
                 three: with two, the pair tests already are the whole set)
    pass_units   per layer, the units the pass will count: a node each for inventory, loopback (its
                 negative control and every NIC) and single node; a round of disjoint pairs for
                 pairwise (a second pass over suspects adds its rounds once it is planned); an
                 nccl test for the whole set. What an earlier pass measured (the ``Cache``) is not
                 run again, so it counts nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from tasks.planning.fabric.outcome import Cache
from tasks.planning.fabric.pairing import pending_rounds

LAYERS = ("inventory", "loopback", "single-node", "pairwise", "full-set")
FULL_SET_COLLECTIVES = ("all_reduce", "alltoall")


def layers_for(n: int) -> tuple[str, ...]:
    return LAYERS[:3] + (("pairwise",) if n >= 2 else ()) + (("full-set",) if n >= 3 else ())


def pass_units(names: Sequence[str], cache: Cache) -> dict[str, int]:
    """Units per layer of a pass over ``names`` (in ``layers_for`` order), less what ``cache`` holds."""
    kept = {"inventory": cache.inventory, "loopback": cache.control, "single-node": cache.single}
    units = {layer: sum(n not in done for n in names) for layer, done in kept.items()}
    units["pairwise"] = len(pending_rounds(names, cache.pairs))
    units["full-set"] = len(FULL_SET_COLLECTIVES)
    return {layer: units[layer] for layer in layers_for(len(names))}
