"""`pdlift benchmark-gate BLUEPRINT` (stage 6), `pdlift benchmark BLUEPRINT [--target URL]` and
`pdlift gate RESULTS BASELINE --blueprint BP`.

`benchmark-gate` is the stage: the run's candidate measured, judged, then promoted or rolled back,
and recorded in the run's ledger, as under `migrate`.

`benchmark` runs the blueprint's load points against one endpoint (the production Service's
first ready endpoint unless --target or --colour says otherwise) and writes the raw requests
and the summaries under the state directory; with --save-baseline the run becomes the baseline
later gates compare with (how the service being replaced is measured first).
`gate` judges a results file against a baseline file, offline. `rollback BLUEPRINT COLOUR` deletes
a candidate colour by hand (its namespace and router; refused for the colour production routes to),
e.g. after a suspended approval ran out of time. Exit codes: 0 PASS, 1 FAIL,
3 INCONCLUSIVE (2 stays "bad input", as for every pdlift command).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

from cli.common import add_run_id, print_record, resolve_run_id
from cli.server import ensure_api

EXIT = {"PASS": 0, "FAIL": 1, "INCONCLUSIVE": 3}


def _target(bp, args) -> str:
    from tasks.benchmark import ready_url
    from tasks.planning.manifests.router import router_name
    from tasks.wiring import Wiring

    if args.target:
        return args.target
    with Wiring(bp) as wiring:
        return ready_url(wiring, router_name(args.colour) if args.colour else bp.name)


def _progress(done: int, total: int, spec) -> None:
    if spec is not None:
        print(f"[{done + 1}/{total} at most] {spec.scenario} concurrency {spec.concurrency} run {spec.repeat + 1} ...",
              file=sys.stderr, flush=True)


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _cmd_benchmark(args: argparse.Namespace) -> int:
    from blueprints.loader import load_blueprint
    from tasks.stages import benchmark as bench
    from tasks.stages.promote import record_baseline
    from tasks.wiring import Wiring

    bp = load_blueprint(args.blueprint)
    run_id = args.run_id or "cli-" + dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    url = _target(bp, args)
    print(f"benchmarking {bp.name} at {url} (run {run_id})", file=sys.stderr)
    wiring = Wiring(bp)
    # A sequential benchmark judges as it goes: against the baseline `pdlift gate` defaults to.
    if bp.benchmark.sequential:
        wiring.state.pull(bench.baseline_key(bp.name))
    baseline = bench.current_baseline(wiring.state_root, bp) if bp.benchmark.sequential else None
    run = bench.run_benchmark(bp, url, bench.bench_dir(wiring.state_root, bp.name, run_id), run_id, wiring.load,
                              progress=_progress, baseline=baseline, seed=0)
    for stop in run.stops:
        print(f"{stop.scenario} @ {stop.concurrency}: {stop.rounds} round(s), {stop.load_s:.0f} s; {stop.note}",
              file=sys.stderr)
    summaries = bench.read_results(run.results_path)
    print(f"{'scenario':<12} {'conc':>5} {'done':>5} {'err':>4} {'TTFT ms':>9} {'p99':>9} {'TPOT ms':>8} "
          f"{'p99':>7} {'out tok/s':>10}")
    for s in sorted(summaries, key=lambda s: (s.scenario, s.concurrency)):
        print(f"{s.scenario:<12} {s.concurrency:>5} {s.completed:>5} {s.failed:>4} {_fmt(s.ttft.mean):>9} "
              f"{_fmt(s.ttft.p99):>9} {_fmt(s.tpot.mean, 2):>8} {_fmt(s.tpot.p99, 2):>7} "
              f"{s.output_tokens_per_s:>10.1f}" + ("  client saturated" if s.client_saturated else ""))
    for note in {n.input_note for n in run.notes if not n.input_exact} | {n.saturation for n in run.notes
                                                                          if n.saturation}:
        print(f"note: {note}")
    print(f"results: {run.results_path}")
    if args.save_baseline:
        path = record_baseline(wiring.state_root, bp, summaries, run_id, args.colour or "production")
        wiring.state.push(bench.baseline_key(bp.name))
        wiring.state.push(bench.baseline_key(bp.name).removesuffix(".json"))
        print(f"baseline: {path}")
    return 0


def _cmd_gate(args: argparse.Namespace) -> int:
    from blueprints.loader import load_blueprint
    from tasks.planning.bench_baseline import baseline_from_spec, loads_baseline
    from tasks.planning.bench_report import render_markdown, report_to_dict
    from tasks.stages import benchmark as bench
    from tasks.stages.benchmark_plot import plot_png

    bp = load_blueprint(args.blueprint)
    summaries = bench.read_results(args.results)
    if args.baseline == "blueprint":
        baseline = baseline_from_spec(bp.baseline)
    else:
        baseline = loads_baseline(Path(args.baseline).read_text())
    if args.aa_history:
        from tasks.planning import aa_offsets
        baseline = aa_offsets.with_between(baseline, aa_offsets.loads_history(Path(args.aa_history).read_text(),
                                                                               args.aa_history))
    # A sequential benchmark decided its stops with its own seed and family: judge them the same way.
    sequential = bench.read_sequential(args.results)
    seed = args.seed if args.seed is not None else int(sequential.get("seed", 0))
    report = bench.judge(bp, summaries, baseline, seed=seed, stops=bench.read_stops(args.results),
                         family=sequential.get("family"))
    if args.plot:
        Path(args.plot).write_bytes(plot_png(summaries, baseline, f"{bp.name}: candidate vs baseline"))
    print(json.dumps(report_to_dict(report), indent=1) if args.json else render_markdown(report))
    return EXIT[report.outcome.value]


def _cmd_benchmark_gate(args: argparse.Namespace) -> int:
    from flows.benchmark import benchmark_flow

    run_id = resolve_run_id(args.blueprint, args.run_id)
    ensure_api()
    print_record(run_id, benchmark_flow(args.blueprint, run_id, colour=args.colour, target=args.target))
    return 0


def _cmd_rollback(args) -> int:
    from blueprints.loader import load_blueprint
    from tasks.stages import deploy
    from tasks.wiring import Wiring

    bp = load_blueprint(args.blueprint)
    with Wiring(bp) as wiring:
        done = deploy.rollback(bp, wiring.kube, args.colour, wait_s=0)
    print(f"{bp.name}: rolled back {done.colour}: deleted " + (", ".join(done.deleted) or "nothing (already gone)"))
    return 0


def register(sub: argparse._SubParsersAction, handlers: dict) -> None:
    p = sub.add_parser("benchmark", help="measure an endpoint with the blueprint's benchmark scenarios")
    p.add_argument("blueprint")
    p.add_argument("--target", help="base URL of an OpenAI-compatible server (default: the production Service)")
    p.add_argument("--colour", choices=["blue", "green"], help="measure this colour's router instead")
    p.add_argument("--run-id", help="names the run's directory under the state dir (default: cli-<time>)")
    p.add_argument("--save-baseline", action="store_true", help="record this run as the gate's baseline")
    handlers["benchmark"] = _cmd_benchmark

    s = sub.add_parser("benchmark-gate", help="stage 6: benchmark the run's candidate, gate it, then promote it or "
                                              "roll it back (INCONCLUSIVE waits for an approval in the Prefect UI)")
    s.add_argument("blueprint")
    add_run_id(s, "the run whose candidate to judge (default: derived from the blueprint); the stage is recorded")
    s.add_argument("--colour", choices=["blue", "green"], help="the candidate (default: the one the run deployed)")
    s.add_argument("--target", help="measure this URL instead of the candidate's router")
    handlers["benchmark-gate"] = _cmd_benchmark_gate

    g = sub.add_parser("gate", help="judge benchmark results against a baseline (exit 0 PASS, 1 FAIL, 3 INCONCLUSIVE)")
    g.add_argument("results", help="results.json written by `pdlift benchmark` or the benchmark stage")
    g.add_argument("baseline", help="a baseline document (<state>/baselines/<deployment>.json), or the word "
                                    "'blueprint' for the blueprint's published figures")
    g.add_argument("--blueprint", required=True, help="the blueprint whose gate rules apply")
    g.add_argument("--json", action="store_true", help="the report as JSON instead of markdown")
    g.add_argument("--plot", help="also write the TTFT/TPOT plot to this PNG file")
    g.add_argument("--seed", type=int, default=None,
                   help="bootstrap seed (the verdict is deterministic per seed; default: the one the benchmark used, else 0)")
    g.add_argument("--aa-history", help="the deployment's A/A history (<state>/aa-offsets/<deployment>.json): a "
                                        "recorded baseline is judged with the between-session spread it shows, as "
                                        "the benchmark stage judges it")
    handlers["gate"] = _cmd_gate

    r = sub.add_parser("rollback", help="delete a candidate colour (refused for the colour production routes to)")
    r.add_argument("blueprint")
    r.add_argument("colour", choices=["blue", "green"])
    handlers["rollback"] = _cmd_rollback
