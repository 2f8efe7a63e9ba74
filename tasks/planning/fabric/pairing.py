"""Who tests with whom: the round-robin tournament, the second pass and the bad-node finder.

Round robin is the circle method SuperBench's ``pair-wise`` pattern uses: for N nodes, N-1
rounds of N/2 disjoint pairs, every pair exactly once, each round run in parallel. With odd N
one node sits out each round and there are N rounds. The bad node is "the node common to the
failing pairs" (Azure outlier_detection.md); when failures cannot be told apart, each suspect
is re-paired with a known-good node, as Google's cluster-health-scanner second pass does "to
reduce false positives".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

Pair = tuple[str, str]


def pair_key(a: str, b: str) -> Pair:
    """The canonical (sorted) spelling of a pair, for lookups."""
    return (a, b) if a <= b else (b, a)


def pair_name(pair: Pair) -> str:
    return f"{pair[0]}<->{pair[1]}"


def _unique(nodes: Iterable[str]) -> list[str]:
    names = list(nodes)
    if len(set(names)) != len(names):
        dupes = sorted(n for n, c in Counter(names).items() if c > 1)
        raise ValueError(f"node names must be unique; repeated: {', '.join(dupes)}")
    return names


def round_robin_rounds(nodes: Sequence[str]) -> tuple[tuple[Pair, ...], ...]:
    """Every pair exactly once, in rounds of disjoint pairs (circle method)."""
    ring: list[str | None] = list(_unique(nodes))
    if len(ring) < 2:
        return ()
    if len(ring) % 2:
        ring.append(None)  # the bye: whoever meets it sits this round out
    n = len(ring)
    rounds = []
    for _ in range(n - 1):
        pairs = tuple((a, b) for a, b in ((ring[i], ring[n - 1 - i]) for i in range(n // 2))
                      if a is not None and b is not None)
        rounds.append(pairs)
        ring = [ring[0], ring[-1], *ring[1:-1]]  # keep the first fixed, rotate the rest
    return tuple(rounds)


def pending_rounds(nodes: Sequence[str], measured: Iterable[Pair] = ()) -> tuple[tuple[Pair, ...], ...]:
    """The tournament's rounds less the pairs already measured (an earlier pass's, kept until a
    node is replaced); rounds left empty are dropped, the rest stay disjoint."""
    done = {pair_key(*p) for p in measured}
    rounds = (tuple(p for p in r if pair_key(*p) not in done) for r in round_robin_rounds(nodes))
    return tuple(r for r in rounds if r)


def second_pass_rounds(suspects: Sequence[str], known_good: Sequence[str],
                       already_tested: Iterable[Pair] = ()) -> tuple[tuple[Pair, ...], ...]:
    """Pair each suspect with one known-good node, preferring a partner it has not met yet.

    A good node serves one suspect per round, so pairs in a round stay disjoint; with more
    suspects than good nodes the pass takes several rounds. Empty when no node is known good.
    """
    good = [g for g in _unique(known_good) if g not in set(suspects)]
    pending = [s for s in _unique(suspects)]
    if not good:
        return ()
    met = {pair_key(*p) for p in already_tested}
    load: Counter[str] = Counter()
    rounds = []
    while pending:
        busy: set[str] = set()
        this_round = []
        for suspect in list(pending):
            free = [g for g in good if g not in busy]
            if not free:
                break
            partner = min(free, key=lambda g: (pair_key(suspect, g) in met, load[g], good.index(g)))
            this_round.append((suspect, partner))
            busy.add(partner)
            load[partner] += 1
            pending.remove(suspect)
        rounds.append(tuple(this_round))
    return tuple(rounds)


def bisect(nodes: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Halves for the bisection search when a whole-set test fails (Azure nccl_diagnosis.md)."""
    names = _unique(nodes)
    half = (len(names) + 1) // 2
    return tuple(names[:half]), tuple(names[half:])


@dataclass(frozen=True)
class BadNodeFinding:
    bad: tuple[str, ...] = ()  # common to the failing pairs (or failed again with a good node)
    suspects: tuple[str, ...] = ()  # in a failing pair that the evidence cannot pin on anyone yet
    good: tuple[str, ...] = ()  # tested, and every failure it was in is explained by a bad node
    untested: tuple[str, ...] = ()
    failing_pairs: tuple[Pair, ...] = ()
    unexplained_pairs: tuple[Pair, ...] = ()  # failed, yet both nodes passed with good partners
    reasons: Mapping[str, str] = field(default_factory=dict)


def find_bad_nodes(nodes: Sequence[str], pair_failed: Mapping[Pair, bool]) -> BadNodeFinding:
    """Attribute failing pairs to nodes.

    1. A node that failed with every partner (at least two) is bad.
    2. Then, repeatedly, the single node in the most unexplained failing pairs (two or more)
       is bad, and the pairs it explains are set aside.
    3. Nodes left in unexplained failing pairs are suspects for the second pass.
    """
    names = _unique(nodes)
    known = set(names)
    partners: dict[str, set[str]] = {n: set() for n in names}
    failing: set[Pair] = set()
    for (a, b), failed in pair_failed.items():
        if a not in known or b not in known or a == b:
            raise ValueError(f"pair {a}<->{b} is not between two distinct listed nodes")
        partners[a].add(b)
        partners[b].add(a)
        if failed:
            failing.add(pair_key(a, b))
    fails_of = {n: {p for p in failing if n in p} for n in names}
    reasons: dict[str, str] = {}
    bad = [n for n in names if len(partners[n]) >= 2 and len(fails_of[n]) == len(partners[n])]
    for n in bad:
        reasons[n] = f"failed with every partner ({', '.join(sorted(partners[n]))})"
    remaining = {p for p in failing if not set(p) & set(bad)}
    for _ in range(len(names)):
        counts = Counter(n for p in remaining for n in p)
        if not counts:
            break
        top = max(counts.values())
        leaders = [n for n, c in counts.items() if c == top]
        if top < 2 or len(leaders) != 1:
            break
        node = leaders[0]
        bad.append(node)
        reasons[node] = (f"common to {top} failing pairs: "
                         + ", ".join(pair_name(p) for p in sorted(remaining) if node in p))
        remaining = {p for p in remaining if node not in p}
    suspects = [n for n in names if n not in bad and any(n in p for p in remaining)]
    for n in suspects:
        reasons[n] = ("in failing pair(s) that do not single it out: "
                      + ", ".join(pair_name(p) for p in sorted(remaining) if n in p))
    good = [n for n in names if partners[n] and n not in bad and n not in suspects]
    return BadNodeFinding(tuple(bad), tuple(suspects), tuple(good),
                          tuple(n for n in names if not partners[n]), tuple(sorted(failing)),
                          (), reasons)


def settle_second_pass(finding: BadNodeFinding, pair_failed: Mapping[Pair, bool]) -> BadNodeFinding:
    """Fold in the suspects' runs with known-good partners.

    A suspect that fails again with a known-good node is bad (that partner passed everything
    else); one that passes is cleared. A failing first-pass pair whose two nodes were both
    cleared is reported as unexplained (a link, or a transient fault), not pinned on a node.
    """
    good = set(finding.good)
    bad, cleared = list(finding.bad), []
    reasons = dict(finding.reasons)
    for suspect in finding.suspects:
        results = {(b if a == suspect else a): failed for (a, b), failed in pair_failed.items()
                   if suspect in (a, b) and ({a, b} - {suspect}) <= good}
        failed_with = sorted(g for g, failed in results.items() if failed)
        if failed_with:
            bad.append(suspect)
            reasons[suspect] = f"failed again with known-good {', '.join(failed_with)}"
        elif results:
            cleared.append(suspect)
            reasons[suspect] = f"passed with known-good {', '.join(sorted(results))}"
    suspects = [s for s in finding.suspects if s not in bad and s not in cleared]
    now_good = [n for n in (*finding.good, *cleared)]
    unexplained = tuple(p for p in finding.failing_pairs
                        if not set(p) & set(bad) and set(p) <= set(now_good))
    return BadNodeFinding(tuple(bad), tuple(suspects), tuple(now_good), finding.untested,
                          finding.failing_pairs, finding.unexplained_pairs + unexplained, reasons)
