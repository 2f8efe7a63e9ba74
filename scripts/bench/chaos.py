#!/usr/bin/env python3
"""Chaos: one fault at a random moment of a random stage of a migrate, what an operator does
next, then pdlift's invariants, trial after trial.

    scripts/bench/chaos.py [--trials N] [--seed S] [--faults a,b] [--table FILE] [--keep-up]

It brings up a sandbox, a Prefect server, prefect.yaml's deployments and a process worker of its
own (files in <state>/chaos, a free port, node addresses 127.0.7.x: nothing of the demo's is
touched; the run state in the sandbox's S3, as in production), writes a two-node blueprint (one prefill, one decode node; a short benchmark) and runs
each trial on a fresh fleet:

1. start the ``migrate`` deployment over REST with a run id of the trial's own;
2. wait for the chosen stage's subflow to run, wait the chosen moment, inject the fault
   (``chaos_faults.CATALOGUE``);
3. act as an operator: a run that crashed or failed is re-triggered with the same run id
   (twice at most); a run whose worker died is marked crashed first and a worker started again;
4. check the invariants:
   - the run reached a gate decision, or failed cleanly: its log names what still bills per
     hour and the teardown command;
   - one capacity reservation per run id (creates that took effect, from the AWS endpoint's
     request log) and, once decided, as many running instances as the fleet has nodes;
   - no verified weight byte fetched twice (bytes verified on the nodes when the fault hit vs the
     bytes the staging that finished fetched);
   - production's Service never selected a colour that did not pass the gate (sampled every
     0.3 s through the whole trial);
   - after ``pdlift teardown``: nothing tagged with the deployment billing (reservations,
     instances, placement groups, launch templates) and no namespace of it left.

One row per trial, then the last line ``chaos: trials=N converged=A clean_failures=B violations=V``.
Trials are seeded: ``--seed S`` with the same N picks the same faults, stages and moments.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts" / "bench"))
sys.path.insert(0, str(ROOT / "scripts"))

import peers  # noqa: E402  (standard library only)

if __name__ == "__main__":
    peers.run_in_repo_venv(__file__)

import chaos_faults as faults  # noqa: E402
from chaos_judge import Observed, judge, rolled_back  # noqa: E402
from sandbox.ports import free_port  # noqa: E402

STAGE_FLOWS = {"reserve": "reserve-capacity", "launch": "launch-nodes", "fabric": "validate-fabric",
               "weights": "stage-weights", "deploy": "deploy", "benchmark-gate": "benchmark-gate"}
# The latest moment (seconds after the stage's subflow started) a fault is injected at, about
# the stage's length on the two-node fleet here: a moment past its end hits the next stage.
MOMENT_MAX_S = {"reserve": 1.0, "launch": 3.0, "fabric": 15.0, "weights": 3.0, "deploy": 6.0,
                "benchmark-gate": 20.0}
RETRIGGERS = 2              # what an operator tries before giving up and tearing down
TRIAL_TIMEOUT_S = 1200      # a run still going after this long is stuck: a violation
DEPLOYMENT = "chaos-1p1d"
TERMINAL = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")


@dataclass(frozen=True)
class Trial:
    index: int
    seed: int
    fault: str
    stage: str
    moment_s: float
    outage_s: int        # s3-down, kube-down
    burst: int           # ec2-burst: how many calls fail
    code: str            # ec2-burst: which error

    @property
    def run_id(self) -> str:
        return f"chaos-{self.seed}-{self.index}"


def plan_trials(count: int, seed: int, allowed: tuple[str, ...]) -> list[Trial]:
    """The trials, from the seed alone (the same seed and count give the same campaign)."""
    out = []
    for i in range(count):
        rng = random.Random(f"pdlift-chaos-{seed}-{i}")
        fault = faults.BY_NAME[allowed[i % len(allowed)]] if i < len(allowed) else faults.BY_NAME[rng.choice(allowed)]
        stage = rng.choice(fault.stages)
        out.append(Trial(i, seed, fault.name, stage, round(rng.uniform(0, MOMENT_MAX_S[stage]), 1),
                         rng.randint(5, 30), rng.randint(3, 8), rng.choice(["RequestLimitExceeded", "InternalError"])))
    return out


@dataclass
class Row:
    trial: Trial
    outcome: str = ""
    seconds: float = 0.0
    attempts: int = 1
    injected: str = ""
    hit_stage: str = ""
    violations: list[str] = field(default_factory=list)

    def line(self) -> str:
        t = self.trial
        return (f"| {t.seed} | {t.index} | {self.hit_stage or t.stage} | {t.moment_s:.1f} s | {t.fault} | "
                f"{self.outcome}{' (' + '; '.join(self.violations) + ')' if self.violations else ''} | "
                f"{self.attempts} | {self.seconds:.0f} |")


HEADER = ("| seed | trial | stage hit | moment | fault | outcome | runs | seconds |\n"
          "|---|---|---|---|---|---|---|---|")


# --- the stack ------------------------------------------------------------------------------------

class Stack:
    """The sandbox, Prefect server and worker the campaign runs on (scripts/demo.py's own steps)."""

    def __init__(self, state: Path, node_base: str):
        self.state, self.node_base = state, node_base
        os.environ["PDLIFT_STATE_DIR"] = str(state)
        os.environ.setdefault("PDLIFT_PREFECT_PORT", str(free_port()))
        os.environ.setdefault("PDLIFT_DEMO_WEBHOOK_PORT", str(free_port()))
        import demo  # its paths come from the variables above

        self.demo = demo
        if state.exists():  # a campaign starts from nothing: no ledger, lease or baseline of an earlier one
            demo.down()
            shutil.rmtree(state)
        self.blueprint = self._write_blueprint()
        self.env: dict[str, str] = {}

    def _write_blueprint(self) -> Path:
        import yaml

        doc = yaml.safe_load((ROOT / "blueprints" / "sandbox-2p2d.yaml").read_text())
        port = free_port()
        doc["name"], doc["description"] = DEPLOYMENT, "the chaos bench's two-node fleet (loopback only)"
        doc["topology"] = {"prefill": {"nodes": 1, "tp": 8}, "decode": {"nodes": 1, "dp": 8, "ep": 8, "tp": 1}}
        doc["sandbox"].update({"node_address_base": self.node_base, "ssh_port": port, "model_size_mb": 64})
        doc["aws"]["ssh"]["port"] = port
        doc["benchmark"]["scenarios"] = [{"name": "isl-3k", "input_tokens": 3000, "output_tokens": 16,
                                          "concurrencies": [1, 4], "duration_s": 8, "max_requests": 200}]
        doc["baseline"]["scenarios"] = {"isl-3k": [{"concurrency": 4, "completed": 200, "ttft_ms_mean": 120,
                                                    "tpot_ms_mean": 12}]}
        # The paired gate is a fleet swap's, which no trial runs; sized on this one 8 s point it could
        # not decide, and `pdlift validate` would refuse the blueprint.
        doc["gate"].pop("paired", None)
        # An INCONCLUSIVE gate rolls back (gate.undecided: rollback, the default): a decision either way.
        self.state.mkdir(parents=True, exist_ok=True)
        path = self.state / f"{DEPLOYMENT}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path

    def up(self) -> None:
        # Run state in the sandbox's S3, as in production: an S3 outage reaches leases and ledgers too.
        self.env = self.demo.up(str(self.blueprint), s3_state=True)
        os.environ.update(self.env)

    def store(self):
        """The run state the worker keeps (S3), read as an operator's shell would."""
        import boto3
        from botocore.config import Config

        from tasks.adapters.state_store import S3Store

        s3 = boto3.client("s3", endpoint_url=self.env["AWS_ENDPOINT_URL_S3"], region_name="us-east-2",
                          aws_access_key_id=self.env["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=self.env["AWS_SECRET_ACCESS_KEY"],
                          config=Config(s3={"addressing_style": "path"}))
        return S3Store(self.env["PDLIFT_STATE_URI"], s3, cache_root=self.state / "reader-cache")

    def down(self) -> None:
        self.demo.down()

    @property
    def aws_url(self) -> str:
        return self.env.get("AWS_ENDPOINT_URL_EC2") or self.env["AWS_ENDPOINT_URL"]

    def http(self, method: str, path: str, body: dict | None = None):
        return self.demo.http(method, path, body, attempts=30)

    def trigger(self, run_id: str, attempt: int) -> str:
        dep = self.http("GET", "/deployments/name/migrate/migrate")
        name = f"{run_id}-{attempt}"
        body = {"parameters": {"params": {"blueprint": str(self.blueprint), "run_id": run_id}}, "name": name,
                "tags": ["pdlift-chaos"], "idempotency_key": name}
        return self.http("POST", f"/deployments/{dep['id']}/create_flow_run", body)["id"]

    def flow_run(self, flow_run_id: str) -> dict:
        return self.http("GET", f"/flow_runs/{flow_run_id}")

    def subflows(self, flow_run_id: str) -> list[dict]:
        return self.demo._subflows(flow_run_id, self._names)

    _names: dict[str, str] = {}

    def logs(self, flow_run_id: str) -> str:
        ids = [flow_run_id] + [s["id"] for s in self.subflows(flow_run_id)]
        return "\n".join(self.demo._new_log_lines(ids, set()))

    def start_worker(self) -> None:
        bin_ = ROOT / ".venv" / "bin"
        self.demo.start("worker", [str(bin_ / "prefect"), "worker", "start", "--pool", "pdlift", "--type", "process"],
                        self.env)

    def worker_pid(self) -> int | None:
        pid_file = self.demo.DEMO / "worker.pid"
        return int(pid_file.read_text()) if pid_file.exists() else None

    def restart_server(self) -> None:
        pid_file = self.demo.DEMO / "prefect-server.pid"
        _stop_child(int(pid_file.read_text()))
        pid_file.unlink()
        bin_ = ROOT / ".venv" / "bin"
        self.demo.start("prefect-server", [str(bin_ / "prefect"), "server", "start", "--host", "127.0.0.1", "--port",
                                           str(self.demo.PORT), "--analytics-off"], self.env)
        self.demo.wait_for(lambda: self.demo.http("GET", "/health") is True, "the Prefect server", 120)

    def sandbox(self):
        from sandbox.orchestrator.stack import Sandbox

        return Sandbox(self.state)

    def ec2(self):
        import boto3

        return boto3.client("ec2", region_name="us-east-2", endpoint_url=self.aws_url)

    def kube(self):
        from kubernetes import client, config

        return client.CoreV1Api(config.new_client_from_config(self.env["KUBECONFIG"]))


def _reap(pid: int, timeout_s: float = 10.0) -> bool:
    """Wait (bounded) for a child of this process to exit; True once it has."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        except ChildProcessError:
            return True
        time.sleep(0.1)
    return False


def _stop_child(pid: int) -> None:
    """SIGTERM to the child's group, SIGKILL if it has not exited within 20 s."""
    for sig, grace in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pid, sig)
        except OSError:
            return
        if _reap(pid, grace):
            return


def _restart_s3(stack: Stack, port: int) -> None:
    """SeaweedFS back at the address every client has (its data directory kept)."""
    sb = stack.sandbox()
    sb.start(["s3"], overrides={"s3_port": port})
    if sb.settings["s3_ports"]["s3"] != port:
        raise RuntimeError(f"SeaweedFS came back on port {sb.settings['s3_ports']['s3']}, not {port}")


# --- one trial ------------------------------------------------------------------------------------

class ProductionWatch:
    """Samples what production's Service selects through the whole trial."""

    def __init__(self, stack: Stack):
        self.stack, self.seen, self._stop = stack, {}, threading.Event()  # colour -> first seen (epoch s)
        self.thread = threading.Thread(target=self._loop, name="chaos-production", daemon=True)

    def _loop(self) -> None:
        from kubernetes.client.exceptions import ApiException

        api = self.stack.kube()
        while not self._stop.wait(0.3):
            try:
                svc = api.read_namespaced_service(DEPLOYMENT, DEPLOYMENT, _request_timeout=2)
            except (ApiException, OSError, Exception):  # absent, or the API is down right now
                continue
            colour = (svc.spec.selector or {}).get("pdlift.io/colour")
            if colour:
                self.seen.setdefault(colour, time.time())

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *_):
        self._stop.set()
        self.thread.join(timeout=10)


def _run_instances(stack: Stack, run_id: str) -> list[str]:
    from tasks.planning import identity

    found = stack.ec2().describe_instances(Filters=identity.run_filters(DEPLOYMENT, run_id))
    return [i["InstanceId"] for r in found["Reservations"] for i in r["Instances"]
            if i["State"]["Name"] in ("pending", "running")]


def _verified_bytes(stack: Stack, instance_ids: list[str]) -> int:
    total = 0
    for iid in instance_ids:
        for path in (stack.state / "sandbox" / "nodes" / iid / "nvme").rglob("*"):
            if path.is_file() and not path.name.startswith(".") and ".pdlift-" not in path.name and "/models/" in str(path):
                total += path.stat().st_size
    return total


def _wait_for_stage(stack: Stack, flow_run_id: str, trial: Trial, deadline: float) -> str:
    """Wait until the trial's stage runs (or the run ended): returns the stage it is in."""
    wanted = STAGE_FLOWS[trial.stage]
    while time.monotonic() < deadline:
        subs = stack.subflows(flow_run_id)
        if any(s["flow_name"] == wanted and s["state_type"] in ("RUNNING", "PAUSED", *TERMINAL) for s in subs):
            return trial.stage
        if stack.flow_run(flow_run_id)["state_type"] in TERMINAL:
            return "after the run"
        time.sleep(0.2)
    return "never"


def _current_stage(stack: Stack, flow_run_id: str) -> str:
    back = {v: k for k, v in STAGE_FLOWS.items()}
    running = [s for s in stack.subflows(flow_run_id) if s["state_type"] in ("RUNNING", "PAUSED")]
    return back.get(running[-1]["flow_name"], running[-1]["flow_name"]) if running else "between stages"


def inject(stack: Stack, trial: Trial, flow_run_id: str, heals: list[threading.Thread]) -> str:
    """Do the fault; returns what was done. Heals of timed outages go to ``heals``."""
    if trial.fault == "worker-sigkill":
        pid = stack.worker_pid()
        hit = faults.kill_tree(pid) if pid else 0
        if pid:
            _reap(pid)  # a child of this process: unreaped, it would still look alive to the restart
        # The operator's part (or Prefect's zombie detection): the orphaned run is marked crashed,
        # a worker is started again; the loop below re-triggers the run.
        if stack.flow_run(flow_run_id)["state_type"] not in TERMINAL:  # a run that had ended keeps its end
            stack.http("POST", f"/flow_runs/{flow_run_id}/set_state",
                       {"state": {"type": "CRASHED", "message": "chaos: worker killed"}, "force": True})
        stack.start_worker()
        return f"killed the worker's tree ({hit} processes)"
    if trial.fault == "prefect-restart":
        t0 = time.monotonic()
        stack.restart_server()
        return f"Prefect server restarted ({time.monotonic() - t0:.0f} s down)"
    if trial.fault == "s3-down":
        sb = stack.sandbox()
        port = sb.settings["s3_ports"]["s3"]
        sb.stop(["s3"])
        heals.append(faults.later(trial.outage_s, lambda: _restart_s3(stack, port)))
        return f"SeaweedFS stopped for {trial.outage_s} s"
    if trial.fault == "kube-down":
        pid = stack.sandbox().running_pid("kube")
        os.kill(pid, faults.signal.SIGSTOP)
        heals.append(faults.later(trial.outage_s, lambda: os.kill(pid, faults.signal.SIGCONT)))
        return f"Kubernetes API frozen for {trial.outage_s} s"
    if trial.fault == "ec2-burst":
        faults.aws_admin(stack.aws_url, "POST", "/__sandbox/faults",
                         {"action": "*", "code": trial.code, "times": trial.burst})
        return f"{trial.burst} x {trial.code} on the next EC2 calls"
    instances = _run_instances(stack, trial.run_id)
    if not instances:
        return "no instance yet: nothing to hit"
    if trial.fault == "sshd-killed":
        victim = sorted(instances)[trial.index % len(instances)]
        pid = faults.sshd_pid(stack.state, victim)
        if pid:
            os.kill(pid, faults.signal.SIGKILL)
            return f"sshd of {victim} killed"
        return f"{victim} has no sshd"
    if trial.fault == "stager-killed":
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            running = faults.stager_pids(set(instances))
            if running:
                pid, node = running[0]
                os.kill(pid, faults.signal.SIGKILL)
                return f"stager on {node} killed"
            time.sleep(0.05)
        return "no stager running: nothing to hit"
    raise ValueError(trial.fault)


def _teardown(stack: Stack) -> str:
    out = subprocess.run([str(ROOT / ".venv" / "bin" / "pdlift"), "teardown", str(stack.blueprint)], env=stack.env,
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    return out.stdout + out.stderr if out.returncode else ""


def _billing_left(stack: Stack) -> list[str]:
    from tasks.planning import identity

    ec2, f = stack.ec2(), identity.run_filters(DEPLOYMENT)
    left = [r["CapacityReservationId"] for r in ec2.describe_capacity_reservations(Filters=f)["CapacityReservations"]
            if r["State"] in ("active", "pending", "scheduled", "payment-pending")]
    left += [
        i["InstanceId"] for r in ec2.describe_instances(Filters=f)["Reservations"] for i in r["Instances"]
        if i["State"]["Name"] not in ("terminated", "shutting-down")]
    left += [g["GroupName"] for g in ec2.describe_placement_groups(Filters=f)["PlacementGroups"]
             if g.get("State") != "deleted"]
    left += [t["LaunchTemplateId"] for t in ec2.describe_launch_templates(Filters=f)["LaunchTemplates"]]
    return left


def _reservations_created(stack: Stack, run_id: str) -> int:
    """CreateCapacityReservation requests for the run that took effect (the request log)."""
    log = faults.aws_admin(stack.aws_url, "GET", "/__sandbox/requests?action=CreateCapacityReservation")
    count = 0
    for entry in log:
        tags = [t for spec in (entry.get("params") or {}).get("TagSpecifications") or [] for t in spec.get("Tags") or []]
        if entry.get("status") == 200 and {"Key": "pdlift:run", "Value": run_id} in tags:
            count += 1
    return count


def _verdict(stack: Stack, run_id: str) -> tuple[str, float | None]:
    """The gate report's outcome and when it was judged (epoch s); ("", None) without one."""
    from tasks.stages.benchmark import bench_key

    stored = stack.store().get(f"{bench_key(DEPLOYMENT, run_id)}/gate.json")
    try:
        report = json.loads(stored.data) if stored else {}
        judged = dt.datetime.strptime(report["judged_at"], "%Y-%m-%dT%H:%M:%SZ").replace(
            tzinfo=dt.timezone.utc).timestamp() if report.get("judged_at") else None
        return str(report.get("outcome") or ""), judged
    except (ValueError, KeyError):
        return "", None


NAMESPACES_GONE_TIMEOUT_S = 180


def _wait_namespaces_gone(stack: Stack) -> None:
    """The deployment's namespaces, deleted by the previous trial's teardown, fully gone.
    Kubernetes deletes a terminating namespace's objects (production's Service among them) only
    as the namespace finishes: a trial started before that would see the previous trial's Service
    still selecting its colour, and count it against its own gate."""
    deadline = time.monotonic() + NAMESPACES_GONE_TIMEOUT_S
    while True:
        left = [n.metadata.name for n in stack.kube().list_namespace(
            label_selector=f"pdlift.io/deployment={DEPLOYMENT}").items]
        if not left:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"namespaces {left} still there {NAMESPACES_GONE_TIMEOUT_S} s after the teardown")
        time.sleep(1)


def run_trial(stack: Stack, trial: Trial) -> Row:
    from tasks.adapters.ledger_store import LedgerStore

    _wait_namespaces_gone(stack)
    row, t0 = Row(trial), time.monotonic()
    deadline = t0 + TRIAL_TIMEOUT_S
    heals: list[threading.Thread] = []
    ledgers = LedgerStore(stack.store())
    with ProductionWatch(stack) as watch:
        flow_run_id = stack.trigger(trial.run_id, 1)
        row.hit_stage = _wait_for_stage(stack, flow_run_id, trial, deadline)
        time.sleep(trial.moment_s)
        row.hit_stage = _current_stage(stack, flow_run_id) if row.hit_stage == trial.stage else row.hit_stage
        before = ledgers.load(DEPLOYMENT, trial.run_id)
        weights_done_before = bool(before and "weights" in before.records)
        verified_at_fault = _verified_bytes(stack, _run_instances(stack, trial.run_id))
        row.injected = inject(stack, trial, flow_run_id, heals)
        final = None
        while time.monotonic() < deadline:
            state = stack.flow_run(flow_run_id)
            if state["state_type"] not in TERMINAL:
                time.sleep(1)
                continue
            final = state
            for heal in heals:  # an outage ends before the operator acts
                heal.join()
            # A gate that rolled the candidate back has decided: running it again would not change that.
            if state["state_type"] == "COMPLETED" or row.attempts > RETRIGGERS or rolled_back(stack.logs(flow_run_id)):
                break
            row.attempts += 1
            flow_run_id = stack.trigger(trial.run_id, row.attempts)
            final = None
        for heal in heals:
            heal.join()
    ledger = ledgers.load(DEPLOYMENT, trial.run_id)
    gate = ledger.gate() if ledger else None  # recorded only when promoted (anything else raises)
    fleet = ledger.fleet() if ledger else None
    weights = ledger.records.get("weights") if ledger else None
    verdict, judged_at = _verdict(stack, trial.run_id)
    facts = dict(
        final_state=final["state_type"] if final else None,
        final_message=((final or {}).get("state") or {}).get("message") or "",
        verdict=verdict, judged_at=judged_at,
        promoted_colour=gate.promotion.colour if gate is not None and gate.promotion else None,
        logs=stack.logs(flow_run_id) if final else "",
        reservations_created=_reservations_created(stack, trial.run_id),
        fleet_nodes=len(fleet.nodes) if fleet else None,
        instances_running=len(_run_instances(stack, trial.run_id)),
        weights_done_before_fault=weights_done_before,
        weights_fetched=weights.bytes_fetched if weights else None,
        weights_total=sum(n.bytes_total for n in weights.nodes) if weights else 0,
        verified_at_fault=verified_at_fault, production_seen=dict(watch.seen), timeout_s=TRIAL_TIMEOUT_S)
    teardown_error = _teardown(stack)
    if teardown_error:
        teardown_error = _teardown(stack)  # once more, as an operator would after an error
    namespaces = tuple(n.metadata.name for n in stack.kube().list_namespace(
        label_selector=f"pdlift.io/deployment={DEPLOYMENT}").items if n.status.phase != "Terminating")
    judged = judge(Observed(**facts, billing_after_teardown=tuple(_billing_left(stack)), teardown_error=teardown_error,
                            namespaces_after_teardown=namespaces))
    row.outcome, row.violations = judged.outcome, judged.violations
    faults.aws_admin(stack.aws_url, "DELETE", "/__sandbox/faults")
    row.seconds = time.monotonic() - t0
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=7)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--faults", default=",".join(f.name for f in faults.CATALOGUE),
                        help="comma-separated names from the catalogue (default: all)")
    parser.add_argument("--state", type=Path, default=None, help="default: <PDLIFT_STATE_DIR or .pdlift>/chaos")
    parser.add_argument("--table", type=Path, default=None, help="also write the table (markdown) here")
    parser.add_argument("--node-base", default="127.0.7.11",
                        help="the first node's loopback address (nodes take the next ones; engines bind them)")
    parser.add_argument("--keep-up", action="store_true", help="leave the stack running at the end")
    args = parser.parse_args()
    allowed = tuple(f.strip() for f in args.faults.split(",") if f.strip())
    unknown = [f for f in allowed if f not in faults.BY_NAME]
    if unknown:
        parser.error(f"unknown fault(s) {unknown}; the catalogue: {', '.join(faults.BY_NAME)}")
    state = (args.state or Path(os.environ.get("PDLIFT_STATE_DIR") or ROOT / ".pdlift") / "chaos").resolve()
    trials = plan_trials(args.trials, args.seed, allowed)
    stack = Stack(state, args.node_base)
    print(f"chaos: {len(trials)} trial(s), seed {args.seed}, state {state}", flush=True)
    rows: list[Row] = []
    try:
        stack.up()
        print(HEADER, flush=True)
        for trial in trials:
            try:
                row = run_trial(stack, trial)
            except Exception as e:  # the harness's own failure is a violation too: it proves nothing
                row = Row(trial, outcome="harness error", violations=[f"{type(e).__name__}: {e}"])
                _teardown(stack)
            finally:  # an EC2 burst left over must not hit the next trial
                faults.aws_admin(stack.aws_url, "DELETE", "/__sandbox/faults")
            rows.append(row)
            print(row.line(), f" <- {row.injected}" if row.injected else "", flush=True)
    finally:
        if not args.keep_up:
            stack.down()
    converged = sum(r.outcome.startswith("converged") and not r.violations for r in rows)
    clean = sum(r.outcome == "clean failure" and not r.violations for r in rows)
    violations = sum(bool(r.violations) for r in rows)
    if args.table:
        args.table.write_text(HEADER + "\n" + "\n".join(r.line() for r in rows) + "\n")
    print(f"chaos: trials={len(rows)} converged={converged} clean_failures={clean} violations={violations}",
          flush=True)
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
