"""Which lane of `scripts/test` runs a test, and in which order.

The suite runs in two lanes at once (scripts/test):

- measured: every test whose verdict rests on a figure measured on this machine, one after
  another at normal priority. Two kinds, marked apart so the reason stays visible:
  ``exact`` (EXACT_MODULES, and any test marked ``@timing``: tests/timing.py): a figure against a
  tight bound: the gate deciding at 5-10 % margins, the load generator within 3 % of the latency
  model, a wall-clock limit; ``measured`` (MEASURED_MODULES): end-to-end runs with a benchmark and
  a gate in them, gated with wide margins (tests/fixtures/blueprints.py), whose load generator
  still calls a point INCONCLUSIVE when a busy machine makes its own event loop lag.
- other: every other test, on pytest-xdist workers at nice 19 in a cpu cgroup of nice 10's weight
  (scripts/cpu-group), which get the CPU the measured lane leaves and about a tenth of what it
  wants: the measured lane runs in a cgroup of nice 0's weight (the script says why).

Measured on 2 cores, the measured lane split over workers (2 or 3, at equal or at stepped
priorities, with the exact tests apart at nice -10) finished sooner but never green: the load
generator's event loop lagged 8.8 ms on average and its points went INCONCLUSIVE (the sequential
benchmark, the notifications', recreate's and rolling's gates), and the lowest lane, starved,
ran past its tests' timeouts. The suite needs 1,750-2,100 CPU-seconds (the fewer with the other
lane in its cgroup, below): on 2 cores more workers only reorder the waiting; what is left to gain
is in the work itself.
Nice alone did not hold the other lane back: Linux weighs each session's autogroup equally and
applies nice only inside one (sched(7)), and the tests start their servers, workers and sandbox
processes in sessions of their own, so the other lane took half the machine whenever both lanes
wanted it. The takeover module took 333 s alone and 540 s beside the other lane at nice 19 only.
In a cpu cgroup (scripts/cpu-group) the fresh-clone run went from 1,409 s to 1,164 s at nice
19's weight, the lanes ending together, and to 1,131 s at nice 10's weight, the lane's weight now:
at nice 19's, the other lane kept 1.5 % of the CPUs while the measured lane wanted both, and an SSH
command of one of its tests ran past its 10 s bound under coverage.
The measured lane runs in a cgroup of nice 0's weight too: beside it, the other lane's group
competed with each of the measured lane's sessions at full weight, so with four of them busy it
kept 2.6 % of a contended CPU instead of a tenth, and its tests ran past bounds sized for a loaded
machine, not a starved one: an fi_pingpong past 20 s (0.7 s alone, 24 s beside four busy
sessions, 2.2-2.6 s once those sessions were in one group), a sandbox engine not yet listening
after 8 s, a router killed by a liveness probe the sandbox's kubelet runs every second.
What remains of the slowdown is the machine's: its two vCPUs share a core's resources, a CPU-bound loop on one runs about 15 %
slower while the other is busy (1.56 s alone, 1.75-1.86 s beside two loops in the low cgroup).

The other lane runs ``--dist loadgroup``: a module's tests stay in one worker (its module
fixtures are set up once), and modules that share a costly session stack form one unit
(SHARED_GROUPS; the scheduler is tests/conftest.py's). xdist hands out the units with the most
tests first (its ``--loadscope-reorder``, on by default), so the long end-to-end modules of that
lane start in its second half (one run: canary at 5 minutes, demo at 9, chaos at 10 of 16).
Tried and measured worse too: the chaos slice first and the demo after 40 units (about 4 minutes
in). Beside the takeover, which the measured lane runs first, and each other, the chaos slice took
669 s instead of 362-424 s, the demo 621 s instead of 297-375 s, and the takeover 500 s instead
of 452 s: the other lane is short of CPU all along, and its long units start late at no cost.
(``--dist load`` balances test by test, but hands each worker its first quarter of the tests in
one consecutive chunk: every long module to the first worker.)
Tried and measured worse: the units longest first (the reorder off, LONG_FIRST by median module
time), which replayed from six runs' module times ended the other lane 80-160 s sooner. In the
fresh-clone run the chaos slice, the canary check and the demo started together, each with its own
Prefect server, sandbox and fleet, in a tenth of the CPUs: the demo's Prefect server took over 10 s
to answer a poll, the chaos harness timed out the same way, and the measured lane ran 1,172 s
instead of 1,118-1,145 s (the takeover module 426 s instead of 366-388 s), so the run was no shorter. The measured lane is one process:
its order is LONG_FIRST's, long modules first.
"""

from __future__ import annotations

EXACT_MODULES = (
    "tests/flows/test_benchmark_gate.py",
    "tests/flows/test_gate_resume.py",
    "tests/flows/test_recreate.py",
    "tests/flows/test_rolling.py",
    "tests/sandbox/bench/",
)
MEASURED_MODULES = (
    "tests/e2e/test_notifications.py",
    "tests/e2e/test_two_workers_takeover.py",
    "tests/sandbox/stages/test_fleet_resume.py",
    # the takeover's PostgreSQL cluster and its Prefect server (SHARED_GROUPS)
    "tests/e2e/test_postgres_server.py",
    # a probe point's gate against its own run: in the other lane its load client was starved
    # (saturated: "the latencies would measure the client"), and the point not judged
    "tests/sandbox/engines/test_engine_ttft_probe.py",
)
# Not here, though each runs a whole migrate with a gate, because an INCONCLUSIVE gate (a load
# generator lagging on a busy machine) does not change their verdict, so they run in the other lane:
# tests/e2e/test_demo.py (what the demo prints and leaves, and where its canary secrets go) asks a
# person (gate.undecided: ask) and approves such a gate, as a person would, and asserts which way it
# went; tests/e2e/test_chaos_slice.py's campaign rolls it back (gate.undecided: rollback, the
# default): a decision its judge accepts, as it accepts a promotion.
# Modules that use one session stack: one worker sets it up for all of them.
SHARED_GROUPS = {
    "postgres": ("tests/e2e/test_two_workers_takeover.py", "tests/e2e/test_postgres_server.py",
                 "tests/e2e/test_browser.py"),
}
# The longest modules (their times in .pdlift/test-times.md), longest first: the measured lane runs
# in this order; the other lane's xdist scheduler orders its units by their number of tests.
LONG_FIRST = (
    "tests/e2e/test_two_workers_takeover.py",
    "tests/e2e/test_postgres_server.py",
    # the last of the takeover's stack (SHARED_GROUPS): its sandbox, PostgreSQL and Prefect server
    # are stopped after it (tests/fixtures/early_release.py), not at the end of the lane
    "tests/e2e/test_browser.py",
    "tests/e2e/test_chaos_slice.py",
    "tests/e2e/test_demo.py",
    "tests/flows/test_recreate.py",
    "tests/flows/test_rolling.py",
    "tests/e2e/test_prefect_deployments.py",
    "tests/sandbox/fabric/test_fabric_replace.py",
    "tests/sandbox/fabric/test_fabric_stage.py",
    "tests/e2e/test_parameter_fuzz.py",
    "tests/sandbox/deploy/test_failures.py",
    "tests/sandbox/staging/test_stage_flow.py",
    "tests/sandbox/deploy/test_bring_up.py",
    "tests/sandbox/deploy/test_canary_combinations.py",
    "tests/sandbox/stages/test_launch.py",
    "tests/adapters/test_prefect_results.py",
    "tests/sandbox/test_s3_and_model.py",
    "tests/unit/bench/test_gate_simulation.py",
)


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def is_exact(nodeid: str) -> bool:
    return nodeid.startswith(EXACT_MODULES)


def is_measured(nodeid: str) -> bool:
    return nodeid.startswith(MEASURED_MODULES)


def group_of(nodeid: str) -> str:
    """The xdist unit of a test: its shared stack's name, else its module."""
    module = module_of(nodeid)
    return next((name for name, modules in SHARED_GROUPS.items() if module in modules), module)


def order_key(nodeid: str) -> int:
    """Long modules first, in LONG_FIRST's order; every other module after them, in place."""
    module = module_of(nodeid)
    return LONG_FIRST.index(module) if module in LONG_FIRST else len(LONG_FIRST)
