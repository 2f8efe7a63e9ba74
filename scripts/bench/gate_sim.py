#!/usr/bin/env python3
"""Benchmark: the promotion gate's error rates, measured by simulation instead of asserted.

For each case, draw a baseline run and a candidate run of the reference blueprint's benchmark
(its scenarios and concurrencies, each point measured as 3 repeats of a third of its cap: the
fixed-length gate the reference had before it was sequential) from a realistic latency model, run
the real gate (``tasks.planning.gate.evaluate_gate``, the blueprint's rules and level), and count
its verdicts over many comparisons. ``--sequential`` runs the candidate through the sequential
gate as the benchmark stage does (``tasks.planning.gate_sequential.Schedule``: rounds, looks,
early stops), against the same full-length baseline, beside the fixed gate on the same draw:

    equal        the candidate is the baseline's model: every FAIL is a false FAIL
    ttft+10%     mean TTFT 10% worse (the critical ttft_mean rule allows 5%): every PASS is false
    ttft-tail    10% of requests' TTFT 2.5x slower, the median unchanged (mean about +15%)
    tpot-tail    10% of requests' TPOT 3x slower (mean about +20%; the critical rule allows 15%)

The latency model: log-normal bodies (their spread read off published serving benchmarks, see
``_body_sigma``; ``--noise pessimistic`` for the first, wider model), a heavy tail (2% of requests
about 3x slower), requests in flight together sharing a batch factor (blocks of ``concurrency``
consecutive requests), and a drift per repeat (or round). Request counts follow the load: concurrency x duration / mean end-to-end time.

    .venv/bin/python scripts/bench/gate_sim.py [--draws 1000] [--seed 7] [--workers 2] [--cases ...]
                                               [--duration-scale 4]   # longer points: more requests
                                               [--critical-only]      # the critical rules alone
                                           [--sequential]         # the sequential gate beside the fixed one
                                           [--noise public|pessimistic]

The last line is ``gate_sim: false_fail=X false_pass=Y inconclusive=Z``, the worst case over the
cases (false FAIL of the equal case, false PASS of the regressions, INCONCLUSIVE of any).

No external peer (the sequential gate is compared with the fixed one, both pdlift's): nothing to
install beyond ``scripts/setup``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts" / "bench"))

import peers  # noqa: E402  (standard library only)

if __name__ == "__main__":
    peers.run_in_repo_venv(__file__)

import numpy as np  # noqa: E402

from blueprints.loader import load_blueprint  # noqa: E402
from tasks.planning.bench_baseline import baseline_from_summaries  # noqa: E402
from blueprints.schema import SequentialSpec  # noqa: E402
from tasks.planning.gate import Verdict, evaluate_gate, expected_points  # noqa: E402
from tasks.planning.gate_sequential import Schedule  # noqa: E402
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
TAIL_SHARE, TAIL_FACTOR = 0.02, 3.0
BATCH_SIGMA = 0.05                    # log-normal sigma of the factor the requests of one batch share
NOISE = "public"


def _body_sigma(family: str, concurrency: int) -> float:
    """Log-normal sigma of one request's latency.

    "public" (the default) is read off published serving benchmarks, sigma = ln(p95/p50) / 1.645
    (or ln(p99/p50) / 2.326): TTFT is tight with nothing to wait behind (sglang.bench_serving at
    concurrency 1: median 20.89 ms, p99 24.81 ms -> 0.074; radixarkai.mintlify.app, DeepSeek-OCR
    cookbook) and spreads with queueing (vllm bench serve, vLLM 0.23 on an L4: p95/p50 1.28 at
    concurrency 2 -> 0.15, 1.45 at 8 -> 0.23, 1.42 at 32 -> 0.21; ai.wmx.dev/benchmarks), so
    0.08 + 0.15 (1 - 1/c); TPOT per request barely moves (median 1.52 ms, p99 1.53 ms at
    concurrency 1; E2E p95/p50 1.04 at 32 with 128 output tokens -> 0.025), so 0.05.
    "pessimistic" is the Gate right issue's first model: 0.25 (TTFT) and 0.15 (TPOT, batch 0.08)
    at every concurrency."""
    if NOISE == "pessimistic":
        return 0.25 if family == "ttft" else 0.15
    return 0.08 + 0.15 * (1.0 - 1.0 / concurrency) if family == "ttft" else 0.05


def set_noise(model: str, sequential: dict | None = None) -> None:
    global NOISE
    NOISE = model
    SEQUENTIAL.update(sequential or {})


def _batch_sigma(family: str) -> float:
    return 0.08 if NOISE == "pessimistic" and family == "tpot" else BATCH_SIGMA


def _median(mean: float, family: str, concurrency: int) -> float:
    """The median that gives ``mean`` once the body, the batch factor and the heavy tail are applied."""
    body, batch = _body_sigma(family, concurrency), _batch_sigma(family)
    tail = 1.0 + TAIL_SHARE * (TAIL_FACTOR * math.exp(0.3 ** 2 / 2) - 1.0)
    return mean / (math.exp(body ** 2 / 2 + batch ** 2 / 2) * tail)


def _latencies(rng: np.random.Generator, n: int, mean: float, family: str, block: int, drift: float,
               tail: tuple[float, float]) -> np.ndarray:
    body, batch = _body_sigma(family, block), _batch_sigma(family)
    values = _median(mean, family, block) * rng.lognormal(0.0, body, n)
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
    """One comparison: a fresh baseline run and a fresh candidate run through the real (fixed-length) gate."""
    bp = fixed_blueprint(load_blueprint(REFERENCE))
    rng = np.random.default_rng([seed, draw, zlib_of(case_name)])
    baseline = baseline_from_summaries(_run(bp, rng, CASES["equal"], duration_scale), source="simulated baseline")
    candidate = _run(bp, rng, CASES[case_name], duration_scale)
    gate = bp.gate.model_copy(update={"rules": [r for r in bp.gate.rules if r.critical]}) if critical_only else bp.gate
    report = evaluate_gate(candidate, baseline, gate, expected=expected_points(bp.benchmark), seed=draw)
    return report.outcome.value


SEQUENTIAL = {}                       # --rounds / --spending overrides of benchmark.sequential
FIXED_REPEATS = 3


def fixed_blueprint(bp):
    """The blueprint as a fixed-length gate runs it: a sequential one's cap as 3 repeats of a third
    (the reference's gate before it was sequential), a fixed one as it is."""
    if bp.benchmark.sequential is None:
        return bp
    k = FIXED_REPEATS
    scenarios = [s.model_copy(update={"duration_s": s.duration_s / k, "max_requests": -(-s.max_requests // k)})
                 for s in bp.benchmark.scenarios]
    bench = bp.benchmark.model_copy(update={"scenarios": scenarios, "repeats": k, "sequential": None})
    return bp.model_copy(update={"benchmark": bench})


def sequential_blueprint(bp):
    """The blueprint as the sequential gate runs it: its own ``benchmark.sequential``, or, for one
    without, rounds over the load the fixed gate spends (duration_s x repeats per point)."""
    if bp.benchmark.sequential is not None:
        seq = bp.benchmark.sequential.model_copy(update=SEQUENTIAL)
        return bp.model_copy(update={"benchmark": bp.benchmark.model_copy(update={"sequential": seq})})
    scenarios = [s.model_copy(update={"duration_s": s.duration_s * bp.benchmark.repeats,
                                      "max_requests": s.max_requests * bp.benchmark.repeats})
                 for s in bp.benchmark.scenarios]
    bench = bp.benchmark.model_copy(update={"scenarios": scenarios, "repeats": 1,
                                            "sequential": SequentialSpec(**SEQUENTIAL)})
    return bp.model_copy(update={"benchmark": bench})


def compare_sequential(case_name: str, draw: int, seed: int, critical_only: bool = False) -> tuple[str, float, str]:
    """One comparison through the sequential gate: (verdict, minutes of load, the fixed gate's verdict
    on a full-length candidate run of the same draw)."""
    reference = load_blueprint(REFERENCE)
    bp = fixed_blueprint(reference)
    rng = np.random.default_rng([seed, draw, zlib_of(case_name)])
    baseline = baseline_from_summaries(_run(bp, rng, CASES["equal"]), source="simulated baseline")
    gate = bp.gate.model_copy(update={"rules": [r for r in bp.gate.rules if r.critical]}) if critical_only else bp.gate
    fixed = evaluate_gate(_run(bp, rng, CASES[case_name]), baseline, gate, expected=expected_points(bp.benchmark),
                          seed=draw).outcome.value
    seq_bp = sequential_blueprint(reference)
    schedule = Schedule(seq_bp.benchmark, gate, baseline, seed=draw)
    parts: dict[tuple[str, int], list] = {}
    while (rnd := schedule.next()) is not None:
        got = parts.setdefault(rnd.point, [])
        got.append(_repeat(rng, rnd.scenario.name, rnd.concurrency, rnd.duration_s, CASES[case_name]))
        schedule.record(rnd, _summary(rnd.scenario.name, rnd.concurrency, got), rnd.duration_s)
    summaries = [_summary(s, c, got) for (s, c), got in parts.items()]
    report = evaluate_gate(summaries, baseline, gate, expected=expected_points(seq_bp.benchmark), seed=draw,
                           looks=schedule.looks, stops=schedule.stops)
    return report.outcome.value, schedule.load_s / 60.0, fixed


def simulate_sequential(cases: list[str], draws: int, seed: int, workers: int = 1,
                        critical_only: bool = False) -> dict[str, dict[str, float]]:
    """{case: {verdict: rate, "fixed " + verdict: rate, "minutes_mean", "minutes_p95", "seconds"}}"""
    out = {}
    for name in cases:
        start = time.monotonic()
        args = ([name] * draws, range(draws), [seed] * draws, [critical_only] * draws)
        if workers > 1:
            with ProcessPoolExecutor(workers, initializer=set_noise, initargs=(NOISE, dict(SEQUENTIAL))) as pool:
                got = list(pool.map(compare_sequential, *args, chunksize=2))
        else:
            got = [compare_sequential(*a) for a in zip(*args)]
        verdicts, minutes, fixed = [g[0] for g in got], np.array([g[1] for g in got]), [g[2] for g in got]
        out[name] = {v.value: verdicts.count(v.value) / draws for v in Verdict}
        out[name].update({f"fixed {v.value}": fixed.count(v.value) / draws for v in Verdict})
        decided = minutes[[v != Verdict.INCONCLUSIVE.value for v in verdicts]]
        out[name].update(minutes_mean=float(minutes.mean()), minutes_p95=float(np.percentile(minutes, 95)),
                         decided_p95=float(np.percentile(decided, 95)) if len(decided) else math.nan,
                         seconds=time.monotonic() - start)
    return out


def print_sequential(results: dict[str, dict[str, float]], draws: int) -> None:
    print(f"{'case':<11} {'draws':>6} {'FAIL':>7} {'PASS':>7} {'INCONCL':>8} {'false':>7} {'fixed false':>12} "
          f"{'fixed INC':>10} {'min mean':>9} {'min p95':>8} {'s':>6}")
    for name, r in results.items():
        bad = "PASS" if CASES[name].regression else "FAIL"
        print(f"{name:<11} {draws:>6} {r['FAIL']:>7.1%} {r['PASS']:>7.1%} {r['INCONCLUSIVE']:>8.1%} {r[bad]:>7.1%} "
              f"{r['fixed ' + bad]:>12.1%} {r['fixed INCONCLUSIVE']:>10.1%} {r['minutes_mean']:>9.1f} "
              f"{r['minutes_p95']:>8.1f} {r['seconds']:>6.0f}")
    ff = max((r["FAIL"] for n, r in results.items() if not CASES[n].regression), default=0.0)
    fp = max((r["PASS"] for n, r in results.items() if CASES[n].regression), default=0.0)
    p95_pass = max((r["minutes_p95"] for n, r in results.items() if not CASES[n].regression), default=math.nan)
    p95_fail = max((r["minutes_p95"] for n, r in results.items() if n == "ttft+10%"), default=math.nan)
    print(f"gate_sim_sequential: minutes_p95_pass={p95_pass:.1f} minutes_p95_fail={p95_fail:.1f} "
          f"false_fail={ff:.3f} false_pass={fp:.3f}")


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
            with ProcessPoolExecutor(workers, initializer=set_noise, initargs=(NOISE, dict(SEQUENTIAL))) as pool:
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
    parser.add_argument("--sequential", action="store_true",
                        help="the sequential gate (rounds, stopped once decided), beside the fixed gate on the same draws")
    parser.add_argument("--noise", choices=("public", "pessimistic"), default="public",
                        help="the latency model's spread (see _body_sigma)")
    parser.add_argument("--rounds", type=int, help="sequential: looks per point (default: the blueprint's)")
    parser.add_argument("--spending", type=float, help="sequential: rho of the spending function")
    parser.add_argument("--order", choices=("rounds", "points"), help="sequential: the order of the rounds")
    args = parser.parse_args(argv)
    set_noise(args.noise, {k: v for k, v in (("rounds", args.rounds), ("spending", args.spending),
                                             ("order", args.order)) if v is not None})
    if args.sequential:
        print_sequential(simulate_sequential(args.cases, args.draws, args.seed, args.workers, args.critical_only),
                         args.draws)
        return 0
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
