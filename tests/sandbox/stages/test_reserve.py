"""Stage 1 against the sandbox EC2 endpoint: reserve, fail over, retry, adopt, refuse; tear down."""

import pytest

from tasks.errors import CapacityUnavailable, RequestRejected
from tasks.planning import ec2_requests as req
from tasks.planning.iam import actions
from tasks.stages import reserve as stage
from tasks.stages import teardown
from tests.sandbox.stages.conftest import tagged

FAST = stage.Clock(sleep=lambda s: None)


def creates(aws_env):
    return aws_env.admin.requests(action="CreateCapacityReservation")


def test_reserve_makes_a_placement_group_and_a_targeted_reservation_in_it(aws_env, adapters, bp, new_run):
    run = new_run(bp)
    reserved = stage.reserve(bp, run.identity, adapters.capacity, run.record, FAST)
    assert reserved.zone == "us-east-2a" and not reserved.adopted
    (call,) = creates(aws_env)
    assert call["params"]["InstanceMatchCriteria"] == "targeted"
    assert call["params"]["PlacementGroupArn"].endswith(reserved.placement_group)
    r = adapters.capacity.reservation(reserved.reservation_id)
    assert r.total == 4 and r.instance_type == "p5en.48xlarge"
    assert r.tags["pdlift:run"] == run.identity.run_id and r.tags["pdlift:stage"] == "reserve"
    kinds = {e.kind for e in run.ledger.entries}
    assert kinds == {"placement-group", "capacity-reservation"}


def test_no_capacity_in_the_first_az_fails_over_to_the_second_with_a_new_token(aws_env, adapters, bp, new_run):
    aws_env.admin.inject(action="CreateCapacityReservation", code="InsufficientInstanceCapacity",
                         zone="us-east-2a", times=-1)
    run = new_run(bp)
    reserved = stage.reserve(bp, run.identity, adapters.capacity, run.record, FAST)
    assert reserved.zone == "us-east-2b"
    assert reserved.blocked_zones == ("us-east-2a: InsufficientInstanceCapacity",)
    tokens = [c["params"]["ClientToken"] for c in creates(aws_env)]
    zones = [c["params"]["AvailabilityZone"] for c in creates(aws_env)]
    assert zones == ["us-east-2a", "us-east-2b"] and tokens[0] != tokens[1]
    assert len(tagged(aws_env, bp.name)["reservations"]) == 1


def test_throttled_three_times_then_retried_with_the_same_token_makes_one_reservation(aws_env, adapters, bp, new_run):
    aws_env.admin.inject(action="CreateCapacityReservation", code="RequestLimitExceeded", times=3)
    run = new_run(bp)
    stage.reserve(bp, run.identity, adapters.capacity, run.record, FAST)
    tokens = {c["params"]["ClientToken"] for c in creates(aws_env)}
    assert len(creates(aws_env)) == 4 and len(tokens) == 1
    assert len(tagged(aws_env, bp.name)["reservations"]) == 1


def test_a_rerun_after_a_crash_before_recording_adopts_the_reservation(aws_env, adapters, bp, new_run):
    run = new_run(bp)
    # The crashed attempt: the placement group and reservation were created, nothing was recorded.
    pg = adapters.capacity.create_placement_group(req.placement_group_request(run.identity))
    orphan = adapters.capacity.create_reservation(
        req.capacity_reservation_request(bp, run.identity, "us-east-2a", pg["GroupArn"]))
    assert run.ledger.entries == ()
    reserved = stage.reserve(bp, run.identity, adapters.capacity, run.record, FAST)
    assert reserved.adopted and reserved.reservation_id == orphan.reservation_id
    assert tagged(aws_env, bp.name)["reservations"] == [orphan.reservation_id]
    assert any(e.resource_id == orphan.reservation_id for e in run.ledger.entries)


@pytest.mark.parametrize("code,fix", [("VcpuLimitExceeded", "quota"), ("InvalidParameterValue", "fix the value")])
def test_quota_and_parameter_errors_fail_at_once_with_the_fix(aws_env, adapters, bp, new_run, code, fix):
    aws_env.admin.inject(action="CreateCapacityReservation", code=code, times=-1)
    run = new_run(bp)
    with pytest.raises(RequestRejected, match=code) as info:
        stage.reserve(bp, run.identity, adapters.capacity, run.record, FAST)
    assert fix in str(info.value)
    assert len(creates(aws_env)) == 1  # no retry, no fail-over
    teardown.release(teardown.inventory(adapters.capacity, adapters.instances, bp.name, None),
                     adapters.capacity, adapters.instances, FAST)
    assert tagged(aws_env, bp.name) == {}


def test_no_capacity_anywhere_fails_naming_every_zone_and_leaks_nothing(aws_env, adapters, bp, new_run):
    aws_env.admin.inject(action="CreateCapacityReservation", code="InsufficientInstanceCapacity", times=-1)
    run = new_run(bp)
    with pytest.raises(CapacityUnavailable, match="us-east-2a.*us-east-2b"):
        stage.reserve(bp, run.identity, adapters.capacity, run.record, FAST)
    assert set(tagged(aws_env, bp.name)) == {"placement_groups"}  # only the free placement group
    teardown.release(teardown.inventory(adapters.capacity, adapters.instances, bp.name, None),
                     adapters.capacity, adapters.instances, FAST)
    assert tagged(aws_env, bp.name) == {}


def test_an_hourly_cost_above_the_limit_is_refused_before_any_spend(aws_env, adapters, bp, new_run):
    cheap = bp.model_copy(update={"aws": bp.aws.model_copy(update={
        "capacity": bp.aws.capacity.model_copy(update={"max_hourly_usd": 100.0})})})
    run = new_run(cheap)
    with pytest.raises(RequestRejected, match="max_hourly_usd"):
        stage.reserve(cheap, run.identity, adapters.capacity, run.record, FAST)
    assert creates(aws_env) == [] and tagged(aws_env, bp.name) == {}


def test_preflight_passes_on_the_sandbox_account_and_refuses_a_closed_security_group(aws_env, adapters, bp):
    notes = stage.preflight(bp, adapters.capacity)
    assert any("AMI" in n for n in notes)
    ec2 = aws_env.client("ec2")
    sg = ec2.describe_security_groups(GroupNames=["pdlift-efa"])["SecurityGroups"][0]
    ec2.revoke_security_group_egress(GroupId=sg["GroupId"], IpPermissions=sg["IpPermissionsEgress"])
    with pytest.raises(RequestRejected, match="to and from itself"):
        stage.preflight(bp, adapters.capacity)


def test_teardown_releases_everything_and_a_second_teardown_is_a_no_op(aws_env, adapters, bp, new_run):
    run = new_run(bp)
    stage.reserve(bp, run.identity, adapters.capacity, run.record, FAST)
    found = teardown.inventory(adapters.capacity, adapters.instances, bp.name, None)
    report = teardown.release(found, adapters.capacity, adapters.instances, FAST)
    assert {f.kind for f in report.released} == {"placement-group", "capacity-reservation"}
    assert tagged(aws_env, bp.name) == {}
    assert teardown.inventory(adapters.capacity, adapters.instances, bp.name, None) == []


def test_sweep_finds_what_a_crashed_run_left(aws_env, adapters, bp, new_run):
    import datetime as dt

    crashed = new_run(bp)
    stage.reserve(bp, crashed.identity, adapters.capacity, crashed.record, FAST)
    found = teardown.inventory(adapters.capacity, adapters.instances, None, None)
    stale = teardown.stale(found, dt.datetime.now(dt.timezone.utc), active_runs={"some-other-run"})
    assert {f.run_id for f in stale} == {crashed.identity.run_id}
    assert {f.kind for f in stale} == {"placement-group", "capacity-reservation"}
    assert teardown.stale(found, dt.datetime.now(dt.timezone.utc), {crashed.identity.run_id}) == []


def test_every_action_the_stage_made_is_in_the_iam_policy(aws_env, adapters, bp, new_run):
    run = new_run(bp)
    stage.preflight(bp, adapters.capacity)
    stage.reserve(bp, run.identity, adapters.capacity, run.record, FAST)
    teardown.release(teardown.inventory(adapters.capacity, adapters.instances, bp.name, None),
                     adapters.capacity, adapters.instances, FAST)
    made = {f"{r['service']}:{r['action']}" for r in aws_env.admin.requests()}
    made = {a.replace("service-quotas:", "servicequotas:") for a in made}
    assert made and made <= set(actions()), made - set(actions())


def test_a_reservation_id_ec2_no_longer_knows_reads_as_gone_so_a_resumed_run_reserves_again(adapters):
    # e.g. the ledger of an old run after the sandbox (or the account's history) forgot it
    assert adapters.capacity.reservation("cr-0123456789abcdef0") is None


def test_a_capacity_block_is_bought_once_recorded_with_its_upfront_fee_and_adopted_on_a_rerun(
        aws_env, adapters, bp, new_run):
    cap = bp.aws.capacity.model_copy(update={"mode": "capacity-block", "duration_hours": 24,
                                             "max_upfront_usd": 10_000})
    block_bp = bp.model_copy(update={"aws": bp.aws.model_copy(update={"capacity": cap})})
    run = new_run(block_bp)
    reserved = stage.reserve(block_bp, run.identity, adapters.capacity, run.record, FAST)
    assert reserved.capacity_block and not reserved.adopted and reserved.placement_group is None
    assert reserved.starts_at and reserved.ends_at  # sold for a start ahead: the pipeline waits for it
    (bought,) = aws_env.admin.requests(action="PurchaseCapacityBlock")
    entry = next(e for e in run.ledger.entries if e.kind == "capacity-block")
    assert entry.resource_id == reserved.reservation_id and entry.usd_per_hour == 0.0
    assert entry.upfront_usd > 0 and "cannot be cancelled" in entry.note
    assert bought["params"]["CapacityBlockOfferingId"].startswith("cb-")
    again = stage.reserve(block_bp, run.identity, adapters.capacity, run.record, FAST)
    assert again.adopted and again.reservation_id == reserved.reservation_id
    assert len(aws_env.admin.requests(action="PurchaseCapacityBlock")) == 1  # never a second block
    report = teardown.release(teardown.inventory(adapters.capacity, adapters.instances, block_bp.name, None),
                              adapters.capacity, adapters.instances, FAST)
    assert any(reserved.reservation_id in kept and "cannot be cancelled" in kept for kept in report.kept)


@pytest.mark.usefixtures("prefect_harness")
def test_the_sweep_flow_reports_what_a_crashed_run_left_and_a_dry_run_releases_nothing(aws_env, adapters, bp,
                                                                                         new_run):
    # The `sweep` deployment's hourly run, in-process: the region's tagged resources listed, those of
    # no active run stale, the report kept as the run's table artifact; apply defaults to false.
    from flows.sweep import sweep_flow

    crashed = new_run(bp)
    stage.reserve(bp, crashed.identity, adapters.capacity, crashed.record, FAST)
    result = sweep_flow("us-east-2", active_runs=["some-other-run"])
    mine = [row for row in result["stale"] if row["run_id"] == crashed.identity.run_id]
    assert {row["kind"] for row in mine} == {"placement-group", "capacity-reservation"}
    assert result["released"] == []
    left = teardown.inventory(adapters.capacity, adapters.instances, bp.name, None)
    assert {f.kind for f in left if f.run_id == crashed.identity.run_id} == {"placement-group", "capacity-reservation"}
