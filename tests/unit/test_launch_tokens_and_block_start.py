"""The launch stage's requests when their predecessor is gone or the capacity has not begun: a half
gang left by a crash is relaunched with a new token generation recorded before the send, a token
EC2 calls spent (IdempotentInstanceTerminated) begins the next generation once, a launch that
races a Capacity Block's start waits, and one far before the start is refused. Against a fake
node lifecycle: what is asserted is the requests and the ledger, in their order."""

import datetime as dt
from dataclasses import replace
from pathlib import Path

import pytest

from blueprints.loader import load_blueprint
from tasks.adapters.ec2_instances import Instance
from tasks.errors import CapacityUnavailable, RequestRejected, StageFailed
from tasks.planning import ec2_requests as req
from tasks.planning.identity import Generation, RunIdentity
from tasks.planning.ledger import now_str
from tasks.planning.records import Reserved
from tasks.stages import launch as stage
from tasks.stages.clock import Clock

ROOT = Path(__file__).resolve().parents[2]
T0 = dt.datetime(2026, 12, 1, 9, tzinfo=dt.timezone.utc)
PENDING = "InvalidCapacityReservationState.PendingActivation"


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def clock(self) -> Clock:
        return Clock(now=lambda: T0 + dt.timedelta(seconds=self.t), sleep=self.sleep, monotonic=lambda: self.t)

    def sleep(self, s: float) -> None:
        self.t += s


class FakeInstances:
    def __init__(self, live):
        self.live = live

    def describe(self, ids=None, filters=None):
        return list(self.live)


class FakeNodes:
    """What _adopt_or_launch and _launch use of NodeLifecycle; ``answers`` are raised in turn."""

    def __init__(self, live=(), answers=(), clock=None):
        self.instances = FakeInstances(live)
        self.answers = list(answers)
        self.events: list[tuple] = []
        self.clock = clock or Clock()
        self.reserved = Reserved("cr-0123456789abcdef0", "us-east-2a", "pg", True, (), False)

    def terminate(self, ids):
        self.events.append(("terminate", tuple(ids)))

    def launch(self, request, count, stage_name, wait_for_slot=False):
        self.events.append(("run", request["ClientToken"], wait_for_slot))
        if self.answers:
            raise self.answers.pop(0)
        return [_instance(f"i-new{n}") for n in range(count)]


def _instance(iid: str) -> Instance:
    return Instance(iid, "running", "us-east-2a", "10.0.0.1", "cr-0123456789abcdef0", "pg", 16, "", {})


@pytest.fixture(scope="module")
def bp():
    return load_blueprint(ROOT / "blueprints" / "sandbox-2p2d.yaml")


RUN = RunIdentity("sandbox-2p2d", "r1", T0, 72)


def _tokens(nodes, ledger: list, generation=Generation()) -> stage._Tokens:
    def record(entry):
        ledger.append(entry)
        nodes.events.append(("record", entry.resource_id))

    return stage._Tokens(generation, record, nodes.clock)


def test_a_half_gang_left_by_a_crash_is_terminated_and_the_gang_relaunched_with_a_new_recorded_token(bp):
    nodes, ledger = FakeNodes(live=[_instance("i-old1"), _instance("i-old2")]), []
    stage._adopt_or_launch(bp, RUN, nodes, "lt-1", _tokens(nodes, ledger))

    crashed = req.run_instances_request(RUN, "lt-1", bp.node_count, 0)["ClientToken"]
    relaunch = req.run_instances_request(RUN, "lt-1", bp.node_count, 0, 1)["ClientToken"]
    assert nodes.events == [("terminate", ("i-old1", "i-old2")), ("record", "launch#1"), ("run", relaunch, True)]
    assert relaunch != crashed  # EC2 answers the crashed launch's token with IdempotentInstanceTerminated
    assert ledger[0].kind == "client-token" and "i-old1" in ledger[0].note and not ledger[0].usd_per_hour


def test_a_first_launch_keeps_the_runs_first_token(bp):
    nodes, ledger = FakeNodes(), []
    stage._adopt_or_launch(bp, RUN, nodes, "lt-1", _tokens(nodes, ledger))
    assert nodes.events == [("run", req.run_instances_request(RUN, "lt-1", bp.node_count, 0)["ClientToken"], False)]
    assert ledger == []


def test_a_spent_token_begins_the_next_generation_once_before_the_launch_is_sent_again(bp):
    spent = RequestRejected("RunInstances: IdempotentInstanceTerminated", code="IdempotentInstanceTerminated")
    nodes, ledger = FakeNodes(answers=[spent]), []
    tokens = _tokens(nodes, ledger, Generation(1, T0))
    stage._adopt_or_launch(bp, RUN, nodes, "lt-1", tokens)

    tried = [e[1] for e in nodes.events if e[0] == "run"]
    assert [e[0] for e in nodes.events] == ["run", "record", "run"]
    assert tried == [req.run_instances_request(RUN, "lt-1", bp.node_count, 0, g)["ClientToken"] for g in (1, 2)]
    assert tokens.generation.number == 2 and ledger[0].resource_id == "launch#2"
    with pytest.raises(RequestRejected):  # twice in a row is no stale token: it is raised
        stage._adopt_or_launch(bp, RUN, FakeNodes(answers=[spent, spent]), "lt-1", _tokens(nodes, []))


def test_a_launch_that_races_the_blocks_start_waits_and_sends_the_same_request_again(bp):
    fake = FakeClock()
    early = CapacityUnavailable("not active yet", code=PENDING)
    nodes = FakeNodes(answers=[early, early], clock=fake.clock())
    launched = stage._adopt_or_launch(bp, RUN, nodes, "lt-1", _tokens(nodes, []))

    tokens = {e[1] for e in nodes.events if e[0] == "run"}
    assert len(launched) == bp.node_count and len(tokens) == 1 and len(nodes.events) == 3
    assert 0 < fake.t < stage.START_RACE_S


def test_a_block_still_not_active_after_the_race_bound_fails_the_stage_naming_it(bp):
    fake = FakeClock()
    forever = [CapacityUnavailable("not active yet", code=PENDING)] * 1000
    nodes = FakeNodes(answers=forever, clock=fake.clock())
    with pytest.raises(StageFailed, match="cr-0123456789abcdef0 was still not active 600 s"):
        stage._adopt_or_launch(bp, RUN, nodes, "lt-1", _tokens(nodes, []))
    assert fake.t >= stage.START_RACE_S


@pytest.mark.parametrize("ahead_s, refused", [(0, False), (stage.START_RACE_S, False), (stage.START_RACE_S + 1, True)])
def test_a_launch_before_a_distant_start_is_refused_with_the_start(ahead_s, refused):
    starts = now_str(T0 + dt.timedelta(seconds=ahead_s))
    reserved = Reserved("cr-0123456789abcdef0", "us-east-2a", None, True, (), False, starts, "")
    clock = Clock(now=lambda: T0)
    if refused:
        with pytest.raises(StageFailed, match=f"begins at {starts}.*migrate flow waits"):
            stage._refuse_a_distant_start(reserved, clock)
    else:
        stage._refuse_a_distant_start(reserved, clock)


def test_the_launch_verification_refuses_an_instance_outside_the_adopted_reservations_placement_group(bp):
    from tasks.stages.nodes import NodeLifecycle

    adopted = Reserved("cr-0123456789abcdef0", "us-east-2a", "pdlift-sandbox-2p2d-r1", False, (), True)
    nodes = NodeLifecycle(bp, RUN, adopted, None, None, lambda entry: None)
    outside = Instance("i-1", "running", "us-east-2a", "10.0.0.1", "cr-0123456789abcdef0", "", 16, "", {})
    with pytest.raises(StageFailed, match="placement group '', not pdlift-sandbox-2p2d-r1"):
        nodes.verify([outside])
    nodes.verify([replace(outside, placement_group="pdlift-sandbox-2p2d-r1", efa_interfaces=bp.fabric.efa_devices)])
