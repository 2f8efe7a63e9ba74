"""Stage 1 against the sandbox when what a run made is gone or not begun: reserving again after a
teardown or long after the run started (a new token generation, recorded before the send, with
its EndDate from now), a crash between the send and the record (adopted), an adopted reservation
that keeps its placement group (and the launch template that names it), and a Capacity Block
that reports its start and end, is searched again when its offering lapsed, and is throttled."""

import datetime as dt

from tasks.adapters.eks import Cluster
from tasks.planning import ec2_requests as req
from tasks.planning import ledger as ledger_plan
from tasks.planning.ledger import parse_time
from tasks.stages import launch as launch_stage
from tasks.stages import reserve as stage
from tests.sandbox.stages.conftest import tagged

FAST = stage.Clock(sleep=lambda s: None)
POLL = stage.Clock()  # real sleeps: the block's payment clears in about a second


def creates(aws_env):
    return aws_env.admin.requests(action="CreateCapacityReservation")


def reserve(bp, run, adapters, clock=FAST):
    return stage.reserve(bp, run.identity, adapters.capacity, run.record, clock,
                         ledger_plan.generations(run.ledger))


def test_reserving_again_after_a_teardown_cancelled_the_reservation_makes_a_new_one_with_a_new_token(
        aws_env, adapters, bp, new_run):
    run = new_run(bp)
    first = reserve(bp, run, adapters)
    adapters.capacity.cancel_reservation(first.reservation_id)  # what a teardown does
    again = reserve(bp, run, adapters)

    tokens = [c["params"]["ClientToken"] for c in creates(aws_env)]
    assert again.reservation_id != first.reservation_id and not again.adopted
    assert adapters.capacity.reservation(again.reservation_id).state in ("pending", "active")
    # The first token replayed the cancelled reservation (as EC2 does); the next generation made a new one.
    assert len(tokens) == 3 and tokens[0] == tokens[1] != tokens[2]
    (generation,) = [e for e in run.ledger.entries if e.kind == "client-token"]
    assert generation.resource_id == "reserve#1" and first.reservation_id in generation.note
    assert tagged(aws_env, bp.name)["reservations"] == [again.reservation_id]


def test_reserving_days_after_the_run_started_counts_the_end_date_from_now(aws_env, adapters, bp, tmp_path):
    from tasks.adapters.ledger_store import LedgerStore
    from tasks.runs import open_run
    from tests.sandbox.stages.conftest import ROOT

    started = dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=3)  # duration_hours 4: long ended
    run = open_run(bp, str(ROOT / "blueprints" / "sandbox-2p2d.yaml"), "old-run", LedgerStore(tmp_path / "s"),
                   now=started)
    reserved = reserve(bp, run, adapters)

    (call,) = creates(aws_env)
    end = dt.datetime.fromisoformat(call["params"]["EndDate"]) if isinstance(call["params"]["EndDate"], str) \
        else call["params"]["EndDate"]
    now = dt.datetime.now(dt.timezone.utc)
    assert reserved.reservation_id.startswith("cr-")
    assert now + dt.timedelta(hours=4) <= end <= now + dt.timedelta(hours=5)
    assert [e.resource_id for e in run.ledger.entries if e.kind == "client-token"] == ["reserve#1"]


def test_a_crash_between_sending_a_new_generation_and_recording_its_reservation_adopts_it(
        aws_env, adapters, bp, new_run):
    run = new_run(bp)
    first = reserve(bp, run, adapters)
    adapters.capacity.cancel_reservation(first.reservation_id)

    def crash_after_the_send(entry):
        if entry.kind == "capacity-reservation" and entry.resource_id != first.reservation_id:
            raise KeyboardInterrupt("the worker died here")
        run.record(entry)

    try:
        stage.reserve(bp, run.identity, adapters.capacity, crash_after_the_send, FAST,
                      ledger_plan.generations(run.ledger))
    except KeyboardInterrupt:
        pass
    assert "reserve#1" in {e.resource_id for e in run.ledger.entries}  # recorded before the send
    resumed = reserve(bp, run, adapters)
    assert resumed.adopted and len(tagged(aws_env, bp.name)["reservations"]) == 1
    assert len(creates(aws_env)) == 3  # no fourth create: the resumed attempt adopted


def test_an_adopted_reservation_keeps_its_placement_group_and_the_launch_template_names_it(
        aws_env, adapters, bp, new_run):
    run = new_run(bp)
    pg = adapters.capacity.create_placement_group(req.placement_group_request(run.identity))
    adapters.capacity.create_reservation(req.capacity_reservation_request(bp, run.identity, "us-east-2a",
                                                                          pg["GroupArn"]))
    adopted = reserve(bp, run, adapters)
    cluster = Cluster(bp.aws.eks.cluster, "https://127.0.0.1:6443", "Q0E=", "10.100.0.0/16")
    template = launch_stage._ensure_template(bp, run.identity, adopted, adapters.capacity, adapters.instances,
                                             cluster, run.record)

    ec2 = aws_env.client("ec2")
    data = ec2.describe_launch_template_versions(LaunchTemplateId=template)["LaunchTemplateVersions"][0][
        "LaunchTemplateData"]
    assert adopted.adopted and adopted.placement_group == pg["GroupName"]
    assert data["Placement"]["GroupName"] == pg["GroupName"]


def _block(bp):
    cap = bp.aws.capacity.model_copy(update={"mode": "capacity-block", "duration_hours": 24,
                                             "max_upfront_usd": 10_000})
    return bp.model_copy(update={"aws": bp.aws.model_copy(update={"capacity": cap})})


def test_a_bought_block_reports_a_start_in_the_future_and_its_end_without_waiting_for_the_start(
        aws_env, adapters, bp, new_run):
    block_bp = _block(bp)
    run = new_run(block_bp)
    before = dt.datetime.now(dt.timezone.utc)
    reserved = reserve(block_bp, run, adapters, POLL)
    waited = (dt.datetime.now(dt.timezone.utc) - before).total_seconds()

    r = adapters.capacity.reservation(reserved.reservation_id)
    assert r.state == "scheduled" and r.available == 0  # paid, not begun: no capacity yet
    assert parse_time(reserved.starts_at) > dt.datetime.now(dt.timezone.utc)
    assert parse_time(reserved.ends_at) > parse_time(reserved.starts_at)
    assert waited < 20  # waited for the payment (about a second), not for the start (a minute)
    again = reserve(block_bp, run, adapters, POLL)
    assert again.adopted and (again.starts_at, again.ends_at) == (reserved.starts_at, reserved.ends_at)


def test_an_offering_that_lapsed_before_the_purchase_is_searched_again(aws_env, adapters, bp, new_run):
    block_bp = _block(bp)
    aws_env.admin.inject(action="PurchaseCapacityBlock", code="InvalidCapacityBlockOfferingIdExpired", times=1)
    aws_env.admin.inject(action="DescribeCapacityBlockOfferings", code="CapacityBlockDescribeLimitExceeded",
                         times=1)
    run = new_run(block_bp)
    reserved = reserve(block_bp, run, adapters, POLL)

    purchases = aws_env.admin.requests(action="PurchaseCapacityBlock")
    describes = aws_env.admin.requests(action="DescribeCapacityBlockOfferings")
    assert reserved.capacity_block and [p.get("error") for p in purchases] == ["InvalidCapacityBlockOfferingIdExpired",
                                                                               None]
    # The throttled describe was retried; each search read every page (2 offerings a page).
    assert describes[0].get("error") == "CapacityBlockDescribeLimitExceeded"
    assert sum(1 for d in describes if d.get("params", {}).get("NextToken")) >= 2

