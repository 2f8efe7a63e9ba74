"""Pure planning for the fabric stage: who tests with whom, and what the results mean.

No I/O and no vendor imports: pairing (round robin, second pass, bisection, bad-node finder),
robust outliers, and PASS / MONITOR / ISOLATE verdicts per node, NIC, pair and whole set.
"""

from tasks.planning.fabric.attribution import attribute_pairs, node_verdicts
from tasks.planning.fabric.judge import (
    judge_full_set, judge_inventory, judge_nics, judge_pairs, judge_single_nodes, nccl_checks,
    negative_control, pair_floors, pingpong_checks,
)
from tasks.planning.fabric.outliers import outliers, robust_scores
from tasks.planning.fabric.pairing import (
    BadNodeFinding, Pair, bisect, find_bad_nodes, pair_key, pair_name, pending_rounds, round_robin_rounds,
    second_pass_rounds, settle_second_pass,
)
from tasks.planning.fabric.records import (
    Check, NcclRun, PairRuns, PingpongRun, Verdict, VerdictRecord, record, to_json, worst,
)

__all__ = [
    "BadNodeFinding", "Check", "NcclRun", "Pair", "PairRuns", "PingpongRun", "Verdict",
    "VerdictRecord", "attribute_pairs", "bisect", "find_bad_nodes", "judge_full_set",
    "judge_inventory", "judge_nics", "judge_pairs", "judge_single_nodes", "nccl_checks",
    "negative_control", "node_verdicts", "outliers", "pair_floors", "pair_key", "pair_name", "pending_rounds",
    "pingpong_checks", "record", "robust_scores", "round_robin_rounds", "second_pass_rounds",
    "settle_second_pass", "to_json", "worst",
]
