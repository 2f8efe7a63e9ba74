"""Progress of the stages that take minutes: the fractions (pure), the units each stage plans and
ticks (fabric's layers over a FakeShell, the deploy wait's Ready counts), the CLI's bar, and the
progress artifacts (``StageProgress`` against a recording stand-in for Prefect's artifact calls):
throttled, final, flushed, only for parts with something planned, and never failing a stage."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from tasks.planning.fabric.outcome import Cache
from tasks.planning.fabric.plan import layers_for, pass_units
from tasks.planning.progress import Count, Tally, gang_counts, percent, ready_counts, render_bar, total


# --- percent: the boundaries ------------------------------------------------------------------

@pytest.mark.parametrize("done, planned, expected", [
    (0, 0, 100.0),  # nothing planned: nothing left to do
    (3, 0, 100.0),
    (0, 17, 0.0),
    (16, 17, 94.1),
    (17, 17, 100.0),  # the last unit: exactly 100
    (2, 3, 66.6),  # rounded down, never up
    (999, 1000, 99.9),  # one unit short is never shown as 100
    (9999, 10000, 99.9),
    (18, 17, 100.0),  # a surplus never goes above 100
    (-1, 4, 0.0),
])
def test_percent_is_done_of_planned_rounded_down_and_reaches_100_only_at_the_last_unit(done, planned, expected):
    assert percent(done, planned) == expected


def test_every_count_short_of_its_plan_stays_below_100_and_never_goes_back():
    for planned in range(1, 400):
        shown = [percent(done, planned) for done in range(planned + 1)]
        assert shown == sorted(shown) and shown[-1] == 100.0 and max(shown[:-1]) < 100.0


def test_the_total_caps_each_part_at_its_plan_so_a_surplus_cannot_fill_another_parts_gap():
    t = total([Count("a", 5, 3), Count("b", 0, 3)])
    assert (t.done, t.planned, t.percent) == (3, 6, 50.0)
    assert total([]).percent == 100.0 and total([Count("a", 2, 2), Count("b", 4, 4)]).percent == 100.0


# --- fabric: what a pass plans, and the tally over passes --------------------------------------

NAMES = ["i-a", "i-b", "i-c", "i-d"]


def test_a_fresh_pass_over_four_nodes_plans_a_node_per_layer_three_pair_rounds_and_two_nccl_tests():
    assert pass_units(NAMES, Cache()) == {"inventory": 4, "loopback": 4, "single-node": 4, "pairwise": 3,
                                          "full-set": 2}


@pytest.mark.parametrize("n, layers, rounds", [(1, 3, None), (2, 4, 1), (3, 5, 3), (5, 5, 5), (8, 5, 7)])
def test_the_layers_and_pair_rounds_of_a_pass_follow_the_fleet_size(n, layers, rounds):
    names = [f"n{i}" for i in range(n)]
    units = pass_units(names, Cache())
    assert list(units) == list(layers_for(n)) and len(units) == layers
    assert units.get("pairwise") == rounds


def test_a_pass_after_a_replacement_plans_only_what_the_new_node_needs():
    cache = Cache(inventory=dict.fromkeys(NAMES, None), control=dict.fromkeys(NAMES, None),
                  single=dict.fromkeys(NAMES, None),
                  pairs={("i-a", "i-b"): None, ("i-a", "i-c"): None, ("i-b", "i-c"): None})
    # i-d was replaced by i-e: only i-e's three pairs are left, one in each round.
    names = ["i-a", "i-b", "i-c", "i-e"]
    cache.forget("i-d")
    assert pass_units(names, cache) == {"inventory": 1, "loopback": 1, "single-node": 1, "pairwise": 3,
                                        "full-set": 2}


def test_the_tally_reaches_100_exactly_when_the_last_unit_of_the_last_pass_is_done():
    tally = Tally(["inventory", "pairwise"])
    tally.begin({"inventory": 4, "pairwise": 3})
    tally.tick("inventory", 4)
    tally.tick("pairwise", 2)
    assert total(tally.counts()).percent == pytest.approx(85.7)
    # The pass stopped at pairwise (a node to replace): the next pass drops the round it never ran.
    tally.begin({"inventory": 1, "pairwise": 3})
    assert total(tally.counts()) == Count("total", 6, 10)
    tally.tick("inventory")
    tally.tick("pairwise", 2)
    tally.add("pairwise", 1)  # a second pass over a suspect
    tally.tick("pairwise")
    assert total(tally.counts()).percent < 100.0
    tally.tick("pairwise")
    assert [(c.name, c.done, c.planned) for c in tally.counts()] == [("inventory", 5, 5), ("pairwise", 6, 6)]
    assert total(tally.counts()).percent == 100.0


def test_a_tally_refuses_a_plan_for_a_part_it_does_not_have():
    with pytest.raises(ValueError, match="teleport"):
        Tally(["inventory"]).begin({"teleport": 1})


def _pairwise_with_progress(slow):
    from tasks.stages.fabric_exec import Runner
    from tasks.stages.fabric_layers import Ctx
    from tasks.stages.fabric_pairs import pairwise
    from tests.unit.test_fabric_pairwise import NODES, SPEC, FakeShell

    reports: list[list[Count]] = []
    ctx = Ctx(SPEC, Runner(FakeShell(slow), "r"), lambda msg: None, 20000,  # type: ignore[arg-type]
              on_progress=lambda counts, final: reports.append(counts))
    ctx.tally.begin(pass_units([n.name for n in NODES], ctx.cache))
    layer = pairwise(ctx, list(NODES))
    return layer, [next(c for c in r if c.name == "pairwise") for r in reports]


def test_the_pairwise_layer_ticks_a_round_at_a_time_to_100():
    layer, seen = _pairwise_with_progress(lambda tag, peers: False)
    assert [(c.done, c.planned) for c in seen] == [(1, 3), (2, 3), (3, 3)]  # the last, at the layer's end
    assert seen[-1].percent == 100.0 and layer.rounds == 3


def test_a_second_pass_over_suspects_adds_its_rounds_and_still_ends_at_100():
    def slow(tag, peers):
        return peers == {"10.0.0.1", "10.0.0.2"} if tag == "p1" else "10.0.0.2" in peers

    layer, seen = _pairwise_with_progress(slow)
    assert layer.rounds == 4
    # The tournament's last round is reported with the round the second pass adds: never 100% before it.
    assert [(c.done, c.planned) for c in seen] == [(1, 3), (2, 3), (3, 4), (4, 4), (4, 4)]
    assert all(c.percent < 100.0 for c in seen[:3]) and seen[-1].percent == 100.0


# --- launch and deploy: the counts ------------------------------------------------------------

def test_the_gang_counts_instances_running_then_joined_and_drops_a_terminated_one():
    states = {"i-1": "running", "i-2": "running", "i-3": "pending", "i-4": "shutting-down"}
    running, joined = gang_counts(4, states, joined={"i-1", "i-4"})
    assert (running.done, running.planned, joined.done, joined.planned) == (2, 4, 1, 4)
    assert total([running, joined]).percent == 37.5
    full = gang_counts(2, {"i-1": "running", "i-2": "running", "i-3": "running"}, joined={"i-1", "i-2", "i-3"})
    assert [c.percent for c in full] == [100.0, 100.0]  # a replacement's overlap never goes past the gang
    assert [c.percent for c in gang_counts(4, {}, ())] == [0.0, 0.0]


def test_pods_ready_per_role_are_counted_against_what_the_colour_runs():
    counts = ready_counts({"prefill": 2, "decode": 2, "router": 2}, {"prefill": 2, "router": 3})
    assert [(c.name, c.done, c.planned) for c in counts] == [("prefill", 2, 2), ("decode", 0, 2), ("router", 2, 2)]
    assert total(counts).percent == 66.6


def test_the_deploy_wait_reports_the_ready_counts_and_a_line_each_time_they_change():
    from tasks.adapters.kube_apply import ContainerState, PodInfo
    from tasks.stages.clock import Clock
    from tasks.stages.deploy_wait import PodGroup, WaitLimits, wait_for_stack

    def pod(name: str, ready: bool) -> PodInfo:
        return PodInfo("ns", name, "node-1", "Running", "10.0.0.1", ready, {}, {},
                       (ContainerState("engine", ready, True, 0),))

    polls = iter([[pod("a", False), pod("b", False)], [pod("a", True), pod("b", False)],
                  [pod("a", True), pod("b", False)], [pod("a", True), pod("b", True)]])
    current: list[PodInfo] = []

    class Kube:
        def pods(self, namespace, selector):
            return current

    current[:] = next(polls)
    lines: list[str] = []
    counts: list[list[Count]] = []
    clock = Clock(sleep=lambda s: current.__setitem__(slice(None), next(polls)))
    wait_for_stack(Kube(), [PodGroup("decode", "ns", {}, 2)], lambda routers: [], WaitLimits(poll_s=0.01),
                   clock, lines.append, counts.append)
    ready = [line for line in lines if line.startswith("pods Ready")]
    assert ready == ["pods Ready: decode 0/2", "pods Ready: decode 1/2", "pods Ready: decode 2/2"]
    assert counts == [[Count("decode", 0, 2)], [Count("decode", 1, 2)], [Count("decode", 2, 2)]]


# --- the CLI's bar -----------------------------------------------------------------------------

class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


COUNTS = [Count("running", 4, 4), Count("joined", 1, 4)]


def test_the_bar_shows_the_total_and_every_count():
    assert render_bar("launch", COUNTS, width=8) == "launch [#####---]  62.5% running 4/4, joined 1/4"


def test_on_a_terminal_the_bar_is_one_line_redrawn_in_place():
    from cli.progress import Bar

    out = _Terminal()
    bar = Bar(out)
    bar("launch", COUNTS)
    bar("launch", [Count("running", 4, 4), Count("joined", 4, 4)])
    bar.close()
    text = out.getvalue()
    assert text.count("\r") == 2 and text.endswith("100.0% running 4/4, joined 4/4\x1b[K\n")


def test_in_a_log_the_bar_writes_a_line_every_ten_seconds_and_the_last_state_at_the_end():
    from cli.progress import Bar

    out = io.StringIO()
    bar = Bar(out)
    for joined in range(5):
        bar("launch", [Count("running", 4, 4), Count("joined", joined, 4)])
    bar.close()
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue() and len(lines) == 2
    assert lines[0].endswith("joined 0/4") and lines[1].endswith("100.0% running 4/4, joined 4/4")


def test_what_a_stage_reports_is_drawn_by_the_bar_while_the_block_runs_and_not_after(artifacts):
    from cli.progress import progress_bar
    from tasks.progress import StageProgress

    out = _Terminal()
    with progress_bar(out):
        StageProgress("d", "launch")([Count("running", 4, 4), Count("joined", 1, 4)])
    drawn = out.getvalue()
    StageProgress("d", "launch")([Count("running", 4, 4), Count("joined", 4, 4)], final=True)
    assert drawn.endswith("  62.5% running 4/4, joined 1/4\x1b[K\n") and out.getvalue() == drawn


def test_the_stage_commands_show_what_their_stage_reports_on_stderr_and_keep_stdout_for_the_record(
        monkeypatch, capsys, artifacts):
    # The flow is the seam: a real launch flow needs EC2 and EKS (tests/sandbox/stages/test_launch.py
    # runs it). What stands in for it reports the way the launch task does, through a StageProgress.
    import json

    import flows.launch
    from cli.main import main
    from tasks.planning.records import Fleet
    from tasks.progress import StageProgress

    def launch_flow(blueprint_path, run_id):
        StageProgress("sandbox-2p2d", "launch")([Count("running", 4, 4), Count("joined", 4, 4)], final=True)
        return Fleet((), "lt-1", 2, ())

    monkeypatch.setattr(flows.launch, "launch_flow", launch_flow)
    monkeypatch.setattr("cli.common.ensure_api", lambda: None)
    assert main(["launch", str(Path(__file__).resolve().parents[2] / "blueprints" / "sandbox-2p2d.yaml")]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["launch_template_id"] == "lt-1"
    assert "launch [##############################] 100.0% running 4/4, joined 4/4" in err
    StageProgress("sandbox-2p2d", "launch")([Count("running", 0, 4)])
    assert capsys.readouterr() == ("", "")  # the bar is gone with the command
    assert "sandbox-2p2d-launch-total" in artifacts.created


# --- the progress artifacts (StageProgress) ------------------------------------------------------

class _Api:
    """The Prefect artifact calls tasks.progress makes: what was sent, in order; ``down`` times them out."""

    def __init__(self):
        self.sent: list[tuple[str, float, str]] = []  # (key, percent, description)
        self.created: dict[str, str] = {}  # key -> artifact id
        self.down: set[str] = set()  # "create", "update"

    def create(self, progress, key, description):
        self._check("create")
        self.created[key] = f"id-{key}"
        self.sent.append((key, progress, description))
        return self.created[key]

    def update(self, artifact_id, progress, description):
        self._check("update")
        self.sent.append((next(k for k, v in self.created.items() if v == artifact_id), progress, description))

    def _check(self, call):
        if call in self.down:
            import httpx

            raise httpx.ReadTimeout("timed out")

    def take(self) -> list[tuple[str, float]]:
        sent, self.sent = [(k, p) for k, p, _ in self.sent], []
        return sent


@pytest.fixture
def artifacts(monkeypatch) -> _Api:
    api = _Api()
    monkeypatch.setattr("tasks.progress.create_progress_artifact", api.create)
    monkeypatch.setattr("tasks.progress.update_progress_artifact", api.update)
    return api


class _Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _progress(**kw):
    from tasks.progress import StageProgress

    clock = _Clock()
    return StageProgress("d", "launch", {"running": "instances running"}, clock=clock, **kw), clock


def _gang(running: int, joined: int = 0) -> list[Count]:
    return [Count("running", running, 2), Count("joined", joined, 2)]


def test_the_first_report_makes_every_artifact_described_with_its_count(artifacts):
    progress, _ = _progress()
    progress(_gang(1))
    assert artifacts.sent == [("d-launch-running", 50.0, "launch running: 1 of 2 instances running"),
                              ("d-launch-joined", 0.0, "launch joined: 0 of 2 units done"),
                              ("d-launch-total", 25.0, "launch total: 1 of 4 units done")]


def test_a_changed_count_is_sent_at_most_every_min_interval_unless_the_report_is_final(artifacts):
    progress, clock = _progress(min_interval_s=2.0)
    progress(_gang(0))
    artifacts.take()
    clock.t = 1.0
    progress(_gang(1))  # too soon after the first: held back
    assert artifacts.take() == []
    clock.t = 2.0
    progress(_gang(1))  # the interval has passed: the change is sent
    assert artifacts.take() == [("d-launch-running", 50.0), ("d-launch-total", 25.0)]
    clock.t = 2.5
    progress(_gang(2, 2), final=True)  # final: sent at once, whatever the interval
    assert artifacts.take() == [("d-launch-running", 100.0), ("d-launch-joined", 100.0), ("d-launch-total", 100.0)]
    progress(_gang(2, 2), final=True)  # nothing changed: nothing to send
    assert artifacts.take() == []


def test_flush_sends_the_count_a_throttled_report_held_back_and_only_that(artifacts):
    progress, clock = _progress(min_interval_s=60.0)
    progress.flush()  # nothing reported yet: nothing to send
    assert artifacts.take() == []
    progress(_gang(0))
    progress(_gang(1, 1))
    assert artifacts.take() == [("d-launch-running", 0.0), ("d-launch-joined", 0.0), ("d-launch-total", 0.0)]
    progress.flush()
    assert artifacts.take() == [("d-launch-running", 50.0), ("d-launch-joined", 50.0), ("d-launch-total", 50.0)]
    progress.flush()
    assert artifacts.take() == []


def test_a_report_the_prefect_api_times_out_never_raises_and_is_a_warning_once(artifacts, caplog):
    import logging

    artifacts.down = {"create", "update"}
    progress, clock = _progress(min_interval_s=0.0, retry_after_s=0.0)
    with caplog.at_level(logging.WARNING, logger="tasks.progress"):
        for n in range(3):
            clock.t = n
            progress(_gang(n % 3), final=n == 2)
        progress.flush()
    (warning,) = [r.getMessage() for r in caplog.records if r.name == "tasks.progress"]
    assert "progress artifact d-launch-running not sent (ReadTimeout: timed out)" in warning
    artifacts.down = set()  # the API is back: the next report is sent
    progress(_gang(2, 1))
    assert ("d-launch-total", 75.0) in artifacts.take()


def test_after_a_failed_call_the_api_is_left_alone_for_a_while_but_a_final_report_tries_again(artifacts):
    progress, clock = _progress(min_interval_s=0.0, retry_after_s=30.0)
    progress(_gang(0))
    artifacts.take()
    artifacts.down = {"update"}
    clock.t = 1.0
    progress(_gang(1))  # times out
    artifacts.down = set()
    clock.t = 20.0
    progress(_gang(2))  # within 30 s of the timeout: not even tried
    assert artifacts.take() == []
    clock.t = 31.0
    progress(_gang(2, 1))
    assert artifacts.take() == [("d-launch-running", 100.0), ("d-launch-joined", 50.0), ("d-launch-total", 75.0)]
    artifacts.down = {"update"}
    clock.t = 32.0
    progress(_gang(2, 1))  # unchanged: nothing tried
    progress(_gang(2, 2))  # times out: quiet until 62 s
    artifacts.down = set()
    progress(_gang(2, 2), final=True)  # the final count is worth one more try
    assert artifacts.take() == [("d-launch-joined", 100.0), ("d-launch-total", 100.0)]


def test_a_failing_listener_is_a_warning_once_and_neither_the_artifacts_nor_other_listeners_miss_a_report(
        artifacts, caplog):
    import logging

    from tasks.progress import progress_listener

    def broken(stage, counts):
        raise BrokenPipeError("stderr is gone")

    seen: list[str] = []
    with progress_listener(broken), progress_listener(lambda stage, counts: seen.append(stage)), \
            caplog.at_level(logging.WARNING, logger="tasks.progress"):
        progress, _ = _progress()
        progress(_gang(1))
        progress(_gang(2), final=True)
    (warning,) = [r.getMessage() for r in caplog.records if r.name == "tasks.progress"]
    assert "listener" in warning and "broken" in warning and "BrokenPipeError" in warning
    assert seen == ["launch", "launch"] and ("d-launch-running", 100.0) in artifacts.take()


@pytest.mark.parametrize("fleet, without", [(2, {"full-set"}), (1, {"pairwise", "full-set"})])
def test_a_fabric_layer_a_fleet_has_nothing_for_gets_no_artifact_and_counts_nothing_in_the_total(
        artifacts, fleet, without):
    from tasks.planning.fabric.plan import LAYERS
    from tasks.progress import StageProgress

    names = [f"n{i}" for i in range(fleet)]
    tally = Tally(LAYERS)  # as the fabric stage keeps it: every layer, planned by each pass
    tally.begin(pass_units(names, Cache()))
    progress = StageProgress("d", "fabric")
    progress(tally.counts())
    for layer in LAYERS:
        tally.tick(layer, fleet)
    progress(tally.counts(), final=True)
    shown = {key: pct for key, pct, _ in artifacts.sent}
    assert set(shown) == {f"d-fabric-{layer}" for layer in LAYERS if layer not in without} | {"d-fabric-total"}
    assert shown["d-fabric-total"] == 100.0
    assert artifacts.sent[-1][2] == f"fabric total: {3 * fleet + (fleet == 2)} of {3 * fleet + (fleet == 2)} units done"


def test_a_part_planned_only_in_a_later_report_gets_its_artifact_then(artifacts):
    from tasks.progress import StageProgress

    progress = StageProgress("d", "fabric", min_interval_s=0.0)
    progress([Count("inventory", 0, 2), Count("pairwise", 0, 0)])
    progress([Count("inventory", 2, 2), Count("pairwise", 0, 1)])
    assert [k for k, _ in artifacts.take()] == ["d-fabric-inventory", "d-fabric-total", "d-fabric-inventory",
                                                "d-fabric-pairwise", "d-fabric-total"]


# --- a stage whose progress reports fail still does its work ---------------------------------------

def _api_down(monkeypatch):
    import httpx

    from tasks.progress import StageProgress

    def down(*args, **kwargs):
        raise httpx.ReadTimeout("timed out")

    monkeypatch.setattr("tasks.progress.create_progress_artifact", down)
    monkeypatch.setattr("tasks.progress.update_progress_artifact", down)
    return StageProgress("d", "stage", min_interval_s=0.0, retry_after_s=0.0)


def test_the_pairwise_layer_reporting_to_an_api_that_times_out_plays_its_tournament_as_usual(monkeypatch):
    from tasks.stages.fabric_exec import Runner
    from tasks.stages.fabric_layers import Ctx
    from tasks.stages.fabric_pairs import pairwise
    from tests.unit.test_fabric_pairwise import NODES, SPEC, FakeShell

    ctx = Ctx(SPEC, Runner(FakeShell(lambda tag, peers: False), "r"), lambda msg: None, 20000,  # type: ignore[arg-type]
              on_progress=_api_down(monkeypatch))
    ctx.tally.begin(pass_units([n.name for n in NODES], ctx.cache))
    layer = pairwise(ctx, list(NODES))
    assert layer.rounds == 3 and not layer.isolate and layer.stop is None


def test_the_deploy_wait_reporting_to_an_api_that_times_out_still_sees_its_pods_ready(monkeypatch):
    from tasks.adapters.kube_apply import ContainerState, PodInfo
    from tasks.stages.clock import Clock
    from tasks.stages.deploy_wait import PodGroup, WaitLimits, wait_for_stack

    polls = iter([[False, False], [True, False], [True, True]])
    current: list[PodInfo] = []

    def poll(_s=0.0):
        current[:] = [PodInfo("ns", f"p{i}", "node-1", "Running", "10.0.0.1", r, {}, {},
                              (ContainerState("engine", r, True, 0),)) for i, r in enumerate(next(polls))]

    class Kube:
        def pods(self, namespace, selector):
            return current

    poll()
    lines: list[str] = []
    wait_for_stack(Kube(), [PodGroup("decode", "ns", {}, 2)], lambda routers: [], WaitLimits(poll_s=0.01),
                   Clock(sleep=poll), lines.append, _api_down(monkeypatch))
    assert "pods Ready: decode 2/2" in lines
