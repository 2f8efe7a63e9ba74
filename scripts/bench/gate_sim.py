#!/usr/bin/env python3
"""Benchmark: the promotion gate's error rates, measured by simulation instead of asserted.

For each case, draw a baseline run and a candidate run of the reference blueprint's benchmark
(its scenarios, concurrencies, durations and 3 repeats) from a realistic latency model, run the
real gate (``tasks.planning.gate.evaluate_gate``, the blueprint's rules and level), and count
its verdicts over many comparisons:

    equal        the candidate is the baseline's model: every FAIL is a false FAIL
    ttft+10%     mean TTFT 10% worse (the critical ttft_mean rule allows 5%): every PASS is false
    ttft-tail    10% of requests' TTFT 2.5x slower, the median unchanged (mean about +15%)
    tpot-tail    10% of requests' TPOT 3x slower (mean about +20%; the critical rule allows 15%)

The latency model: log-normal bodies, a heavy tail (2% of requests about 3x slower), requests in
flight together sharing a batch factor (blocks of ``concurrency`` consecutive requests), and a
drift per repeat. Request counts follow the load: concurrency x duration / mean end-to-end time.

    .venv/bin/python scripts/bench/gate_sim.py [--draws 1000] [--seed 7] [--workers 2] [--cases ...]
                                               [--duration-scale 4]   # longer points: more requests
                                               [--critical-only]      # the critical rules alone

The last line is ``gate_sim: false_fail=X false_pass=Y inconclusive=Z``, the worst case over the
cases (false FAIL of the equal case, false PASS of the regressions, INCONCLUSIVE of any).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from blueprints.loader import load_blueprint  # noqa: E402
from tasks.planning.bench_baseline import baseline_from_summaries  # noqa: E402
from tasks.planning.gate import Verdict, evaluate_gate, expected_points  # noqa: E402
from tasks.planning.metrics import Distribution, Samples, ScenarioSummary  # noqa: E402

REFERENCE = ROOT / "blueprints" / "glm51-fp8-2p2d.yaml"
OUTPUT_TOKENS = 512


@dataclass(frozen=True)
class Case:
    name: str
    regression: bool              # True: a PASS is false; False: a FAIL is false
    ttft_scale: float = 1.0
    tpot_scale: float = 1.0
    ttft_tail: tuple[float, float] = (0.0, 1.0)   # (share of requests, factor)
    tpot_tail: tuple[float, float] = (0.0, 1.0)


CASES = {c.name: c for c in (
    Case("equal", regression=False),
    Case("ttft+10%", regression=True, ttft_scale=1.10),
    Case("ttft-tail", regression=True, ttft_tail=(0.10, 2.5)),
    Case("tpot-tail", regression=True, tpot_tail=(0.10, 3.0)),
)}

# The reference's baseline means per scenario (TTFT, TPOT in ms); a busier engine is a little slower.
MEAN_MS = {"isl-3k": (1450.0, 28.0), "isl-60k": (9800.0, 34.0), "isl-120k": (24500.0, 41.0)}
BODY = {"ttft": (0.25, 0.05), "tpot": (0.15, 0.08)}   # log-normal sigma of a request, of its batch
TAIL_SHARE, TAIL_FACTOR = 0.02, 3.0


def _median(mean: float, family: str) -> float:
    """The median that gives ``mean`` once the body, the batch factor and the heavy tail are applied."""
    body, batch = BODY[family]
    tail = 1.0 + TAIL_SHARE * (TAIL_FACTOR * math.exp(0.3 ** 2 / 2) - 1.0)
    return mean / (math.exp(body ** 2 / 2 + batch ** 2 / 2) * tail)


def _latencies(rng: np.random.Generator, n: int, mean: float, family: str, block: int, drift: float,
               tail: tuple[float, float]) -> np.ndarray:
    body, batch = BODY[family]
    values = _median(mean, family) * rng.lognormal(0.0, body, n)
    values *= np.repeat(rng.lognormal(0.0, batch, -(-n // block)), block)[:n]   # requests in flight together
    values *= np.where(rng.random(n) < TAIL_SHARE, rng.lognormal(math.log(TAIL_FACTOR), 0.3, n), 1.0)
    share, factor = tail
    values *= np.where(rng.random(n) < share, factor, 1.0)
    return values * drift


def _repeat(rng: np.random.Generator, scenario: str, concurrency: int, duration_s: float, case: Case):
    ttft_mean, tpot_mean = MEAN_MS[scenario]
    load = 1.0 + 0.003 * concurrency
    expected_e2e_s = (ttft_mean + (OUTPUT_TOKENS - 1) * tpot_mean) * load / 1000.0
    n = max(2, int(concurrency * duration_s / expected_e2e_s))
    drift = float(rng.lognormal(0.0, 0.02))                # a repeat's own offset (thermals, neighbours)
    ttft = _latencies(rng, n, ttft_mean * load * case.ttft_scale, "ttft", concurrency, drift, case.ttft_tail)
    tpot = _latencies(rng, n, tpot_mean * load * case.tpot_scale, "tpot", concurrency, drift, case.tpot_tail)
    e2e = ttft + (OUTPUT_TOKENS - 1) * tpot
    return ttft, tpot, e2e, duration_s


def _summary(scenario: str, concurrency: int, parts: list) -> ScenarioSummary:
    def one(ttft, tpot, e2e, duration, keep: bool) -> ScenarioSummary:
        n = len(ttft)
        throughput = n * OUTPUT_TOKENS / duration
        return ScenarioSummary(
            scenario, concurrency, n, n, 0, duration, Distribution.of(ttft.tolist()), Distribution.of(tpot.tolist()),
            Distribution(), Distribution.of(e2e.tolist()), Distribution(), n / duration, throughput, throughput,
            n / duration, 0.0,
            samples=Samples(tuple(ttft.tolist()), tuple(tpot.tolist()), (), tuple(e2e.tolist()), (), concurrency)
            if keep else None)

    pooled = one(*(np.concatenate([p[i] for p in parts]) for i in range(3)), sum(p[3] for p in parts), True)
    return ScenarioSummary(**{**pooled.__dict__, "repeats": tuple(one(*p, False) for p in parts)})


def _run(bp, rng: np.random.Generator, case: Case, duration_scale: float = 1.0) -> list[ScenarioSummary]:
    out = []
    for s in bp.benchmark.scenarios:
        for c in s.concurrencies:
            parts = [_repeat(rng, s.name, c, s.duration_s * duration_scale, case) for _ in range(bp.benchmark.repeats)]
            out.append(_summary(s.name, c, parts))
    return out


def compare(case_name: str, draw: int, seed: int, duration_scale: float = 1.0, critical_only: bool = False) -> str:
    """One comparison: a fresh baseline run and a fresh candidate run through the real gate."""
    bp = load_blueprint(REFERENCE)
    rng = np.random.default_rng([seed, draw, zlib_of(case_name)])
    baseline = baseline_from_summaries(_run(bp, rng, CASES["equal"], duration_scale), source="simulated baseline")
    candidate = _run(bp, rng, CASES[case_name], duration_scale)
    gate = bp.gate.model_copy(update={"rules": [r for r in bp.gate.rules if r.critical]}) if critical_only else bp.gate
    report = evaluate_gate(candidate, baseline, gate, expected=expected_points(bp.benchmark), seed=draw)
    return report.outcome.value


def zlib_of(text: str) -> int:
    import zlib

    return zlib.crc32(text.encode())


def simulate(cases: list[str], draws: int, seed: int, workers: int = 1,
             duration_scale: float = 1.0, critical_only: bool = False) -> dict[str, dict[str, float]]:
    """{case: {"FAIL": rate, "PASS": rate, "INCONCLUSIVE": rate, "seconds": ...}}"""
    out = {}
    for name in cases:
        start = time.monotonic()
        if workers > 1:
            with ProcessPoolExecutor(workers) as pool:
                verdicts = list(pool.map(compare, [name] * draws, range(draws), [seed] * draws,
                                         [duration_scale] * draws, [critical_only] * draws, chunksize=4))
        else:
            verdicts = [compare(name, d, seed, duration_scale, critical_only) for d in range(draws)]
        out[name] = {v.value: verdicts.count(v.value) / draws for v in Verdict}
        out[name]["seconds"] = time.monotonic() - start
    return out


def worst(results: dict[str, dict[str, float]]) -> tuple[float, float, float]:
    false_fail = max((r["FAIL"] for n, r in results.items() if not CASES[n].regression), default=0.0)
    false_pass = max((r["PASS"] for n, r in results.items() if CASES[n].regression), default=0.0)
    inconclusive = max((r["INCONCLUSIVE"] for r in results.values()), default=0.0)
    return false_fail, false_pass, inconclusive


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--draws", type=int, default=1000, help="comparisons per case")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--duration-scale", type=float, default=1.0,
                        help="measure each point this many times longer than the blueprint says (more requests)")
    parser.add_argument("--critical-only", action="store_true",
                        help="gate on the blueprint's critical rules only (drop the non-critical ttft_p99)")
    args = parser.parse_args(argv)
    results = simulate(args.cases, args.draws, args.seed, args.workers, args.duration_scale, args.critical_only)
    print(f"{'case':<11} {'draws':>6} {'FAIL':>7} {'PASS':>7} {'INCONCL':>8} {'false':>7} {'s':>7}")
    for name, r in results.items():
        false = r["PASS"] if CASES[name].regression else r["FAIL"]
        print(f"{name:<11} {args.draws:>6} {r['FAIL']:>7.1%} {r['PASS']:>7.1%} {r['INCONCLUSIVE']:>8.1%} "
              f"{false:>7.1%} {r['seconds']:>7.0f}")
    false_fail, false_pass, inconclusive = worst(results)
    print(f"gate_sim: false_fail={false_fail:.3f} false_pass={false_pass:.3f} inconclusive={inconclusive:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
