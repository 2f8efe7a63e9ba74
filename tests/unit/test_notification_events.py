"""The events pdlift emits for notifications, and the automations that turn them into messages.

A failed run that leaves resources billing emits ``pdlift.run.failed-billing`` (what, at what
$/h, the teardown command); the leak sweep emits ``pdlift.sweep.leaks`` when it finds something;
neither payload carries a secret, even one an error message quotes. The automations file renders,
with the templates Prefect's server uses, into messages that name the deployment, the run, the
verdict and a link (the end-to-end path on a real server: tests/e2e/test_notifications.py).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import uuid
from unittest.mock import create_autospec

import pytest
from prefect.logging import disable_run_logger

from blueprints.loader import load_blueprint
from tasks import pipeline as pipeline_tasks
from tasks import teardown as teardown_tasks
from tasks.adapters.ledger_store import LedgerStore
from tasks.adapters.prefect_automations import load_spec
from tasks.adapters.ec2_capacity import Reservation
from tasks.adapters.ec2_instances import Instance
from tasks.errors import ConfigError, StageFailed
from tasks.planning import notifications
from tasks.planning.identity import TAG_CREATED, TAG_DEPLOYMENT, TAG_RUN, TAG_TTL
from tasks.planning.ledger import LedgerEntry
from tasks.runs import open_run
from tasks.stages import teardown as teardown_stage
from tasks.stages.clock import Clock
from tasks.stages.ports import Capacity, Instances

SANDBOX = "blueprints/sandbox-2p2d.yaml"
CANARY = "canary-" + uuid.uuid4().hex  # a secret's value: must appear in no payload


@pytest.fixture
def emitted(monkeypatch) -> list[dict]:
    """What the task wrappers hand ``emit_event``, each checked to make a valid Prefect event."""
    from prefect.events import Event

    seen: list[dict] = []

    def record(**kwargs):
        Event(**kwargs)  # the shape Prefect accepts (resource labels, related roles)
        seen.append(kwargs)

    monkeypatch.setattr(pipeline_tasks, "emit_event", record)
    monkeypatch.setattr(teardown_tasks, "emit_event", record)
    monkeypatch.setattr(pipeline_tasks, "create_markdown_artifact", lambda **_: None)
    return seen


@pytest.fixture
def artifacts(monkeypatch) -> list[str]:
    """The markdown of each artifact ``report_failure`` publishes."""
    seen: list[str] = []
    monkeypatch.setattr(pipeline_tasks, "create_markdown_artifact", lambda **kw: seen.append(kw["markdown"]))
    return seen


@pytest.fixture
def run_log(monkeypatch, caplog) -> pytest.LogCaptureFixture:
    """The records ``report_failure`` logs through its run logger (a plain logger here: no run)."""
    logger = logging.getLogger("pdlift.test.run")
    monkeypatch.setattr(pipeline_tasks, "get_run_logger", lambda: logger)
    caplog.set_level(logging.DEBUG, logger=logger.name)
    return caplog


@pytest.fixture
def secret_env(monkeypatch):
    monkeypatch.setenv("PDLIFT_TEST_API_TOKEN", CANARY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", CANARY + "-aws")


def _failed_run(tmp_path, live: list[LedgerEntry], ended: list[LedgerEntry] = ()):
    bp = load_blueprint(SANDBOX)
    run = open_run(bp, SANDBOX, "r-notify", LedgerStore(tmp_path / "state"))
    for entry in [*live, *ended]:
        run.record(entry)
    for entry in ended:
        run.ended(entry.kind, entry.resource_id)
    return run


def test_a_run_that_fails_with_resources_billing_says_what_they_cost_and_how_to_tear_them_down(
        tmp_path, emitted, secret_env):
    live = [LedgerEntry("capacity-reservation", "cr-0abc", "reserve", "us-east-2a", 0.0),
            LedgerEntry("instance", "i-01", "launch", "us-east-2a", 63.3),
            LedgerEntry("instance", "i-02", "launch", "us-east-2a", 63.3)]
    gone = [LedgerEntry("instance", "i-00", "launch", "us-east-2a", 63.3)]
    run = _failed_run(tmp_path, live, gone)
    error = RuntimeError(f"EFA provider missing on i-01 (Authorization: Bearer {CANARY})\nremote stack trace...")
    with disable_run_logger():
        markdown = pipeline_tasks.report_failure.fn(run, "fabric", error)
    [event] = emitted
    assert event["event"] == "pdlift.run.failed-billing"
    assert event["resource"] == {"prefect.resource.id": f"pdlift.deployment.{run.blueprint.name}",
                                 "prefect.resource.name": run.blueprint.name}
    payload = event["payload"]
    assert payload["run_id"] == "r-notify" and payload["stage"] == "fabric"
    assert payload["hourly_usd"] == 126.6 and "$126.60/h" in markdown  # the artifact and the event agree
    assert [r["id"] for r in payload["resources"]] == ["cr-0abc", "i-01", "i-02"]  # i-00 ended: not billing
    assert payload["resources"][1] == {"kind": "instance", "id": "i-01", "zone": "us-east-2a", "stage": "launch",
                                       "usd_per_hour": 63.3}
    assert payload["teardown"] == f"pdlift teardown {SANDBOX} --run-id r-notify"
    assert payload["error"] == "RuntimeError: EFA provider missing on i-01 (Authorization: Bearer ***)"
    assert CANARY not in json.dumps(event)


WEBHOOK = f"https://hooks.example.com/services/T0/B0/{CANARY}-hook"
DATABASE = f"postgresql+asyncpg://prefect:{CANARY}-db@db.internal:5432/prefect"


def test_a_failed_runs_artifact_log_and_event_carry_no_secret_an_error_quotes(
        tmp_path, emitted, artifacts, run_log, monkeypatch):
    monkeypatch.setenv("PDLIFT_NOTIFY_WEBHOOK", WEBHOOK)
    monkeypatch.setenv("PREFECT_API_DATABASE_CONNECTION_URL", DATABASE)
    run = _failed_run(tmp_path, [LedgerEntry("instance", "i-01", "launch", "us-east-2a", 63.3)])
    # Secrets by value (the variables above), and in URLs no variable holds: userinfo and query.
    unlisted = f"https://admin:{CANARY}-userinfo@api.example.com/v1/x?X-Amz-Signature={CANARY}-query&b=1"
    try:
        try:
            raise ConnectionError(f"POST {WEBHOOK} refused")
        except ConnectionError as cause:
            raise RuntimeError(f"cannot reach {DATABASE}, nor {unlisted}") from cause
    except RuntimeError as e:
        error = e
    markdown = pipeline_tasks.report_failure.fn(run, "deploy", error)
    [event], [artifact] = emitted, artifacts
    logged = "\n".join(r.getMessage() for r in run_log.records if r.name == "pdlift.test.run")
    assert "Traceback" in logged and "ConnectionError: POST *** refused" in logged  # the cause, redacted too
    # A database URL keeps where it points (a diagnosis needs it), never its userinfo: the password.
    assert "postgresql+asyncpg://***@db.internal:5432/prefect" in artifact
    assert "https://***@api.example.com/v1/x?***" in artifact
    assert markdown == artifact and "hooks.example.com" not in logged + artifact
    for where in (json.dumps(event), artifact, logged):
        assert CANARY not in where
    assert not any(r.exc_info for r in run_log.records)  # a traceback Prefect would format whole is never attached


@pytest.mark.parametrize("name", ["PDLIFT_NOTIFY_WEBHOOK", "SLACK_WEBHOOK", "DB_PASSWORD", "GITHUB_TOKEN"])
def test_variables_named_as_webhooks_or_secrets_are_redacted_whole(name):
    assert notifications.secret_values({name: CANARY}) == [CANARY]


@pytest.mark.parametrize("name", ["PREFECT_API_DATABASE_CONNECTION_URL", "AWS_ENDPOINT_URL", "MONGO_URI"])
def test_other_urls_keep_where_they_point_and_lose_their_credentials(name):
    value = f"mongodb://app:{CANARY}@db.internal:27017/x?authSource={CANARY}"
    assert notifications.secret_values({name: value}) == []
    assert notifications.redact(f"cannot reach {value}", notifications.secret_values({name: value})) == \
        "cannot reach mongodb://***@db.internal:27017/x?***"


def test_a_url_loses_its_userinfo_query_and_fragment_but_keeps_where_it_points():
    text = ("Client error '404 Not Found' for url 'https://h.example.com/a/b?token=t1#f' "
            "and postgresql://u:p@ss@db:5432/x (retry)")
    assert notifications.redact(text, []) == ("Client error '404 Not Found' for url "
                                              "'https://h.example.com/a/b?***#***' and postgresql://***@db:5432/x (retry)")
    assert notifications.redact("see http://127.0.0.1:4200/api", []) == "see http://127.0.0.1:4200/api"
    assert notifications.secret_values({"CURL_CA_BUNDLE": "/etc/ssl/ca.pem"}) == []  # URL not a word of it


def test_a_failed_run_with_nothing_left_emits_no_billing_event(tmp_path, emitted):
    run = _failed_run(tmp_path, [], [LedgerEntry("instance", "i-00", "launch", "us-east-2a", 63.3)])
    with disable_run_logger():
        pipeline_tasks.report_failure.fn(run, "launch", RuntimeError("no capacity"))
    assert emitted == []


def _found(kind: str, rid: str, run: str, created: str = "2020-01-01T00:00:00Z") -> teardown_stage.Found:
    return teardown_stage.Found(kind, rid, "dep-a", run, created, 6)


def _tags(run: str, created: str) -> dict[str, str]:
    return {TAG_DEPLOYMENT: "dep-a", TAG_RUN: run, TAG_CREATED: created, TAG_TTL: "6"}


class Region:
    """EC2 in one region behind spec'd fakes of the Capacity and Instances ports (a call the ports
    lack fails), so the sweep's real inventory, stale and release code runs against it.
    ``group_in_use``: DeletePlacementGroup answers InUse forever."""

    OLD, NEW = "2020-01-01T00:00:00Z", "2999-01-01T00:00:00Z"

    def __init__(self, capacity_block: bool = False, group_in_use: bool = False):
        self.instances = {"i-leak": ("running", _tags("r-old", self.OLD)),
                          "i-live": ("running", _tags("r-live", self.NEW))}
        self.groups = {"pg-leak": _tags("r-old", self.OLD)}
        self.blocks = {"cr-block": "active"} if capacity_block else {}
        self.group_in_use = group_in_use
        self.capacity = create_autospec(Capacity, instance=True, spec_set=True)
        self.capacity.reservations.side_effect = self._reservations
        self.capacity.placement_groups.side_effect = lambda filters: [
            {"GroupName": g, "State": "available", "Tags": [{"Key": k, "Value": v} for k, v in t.items()]}
            for g, t in self.groups.items()]
        self.capacity.delete_placement_group.side_effect = self._delete_group
        self.capacity.cancel_reservation.side_effect = lambda rid: pytest.fail(f"{rid} is a block: never cancelled")
        self.ports = create_autospec(Instances, instance=True, spec_set=True)
        self.ports.describe.side_effect = self._describe
        self.ports.terminate.side_effect = self._terminate
        self.ports.launch_templates.return_value = []

    def _describe(self, ids=None, filters=None):
        states = next((f["Values"] for f in filters or [] if f["Name"] == "instance-state-name"), None)
        return [Instance(i, state, "us-east-2a", "", "", "", 0, "", tags) for i, (state, tags) in self.instances.items()
                if (ids is None or i in ids) and (states is None or state in states)]

    def _terminate(self, ids):
        for i in ids:
            self.instances[i] = ("terminated", self.instances[i][1])

    def _delete_group(self, name):
        if self.group_in_use:
            return False
        self.groups.pop(name, None)
        return True

    def _reservations(self, filters=None, ids=None):
        return [Reservation(r, "us-east-2a", "p5en.48xlarge", state, 4, 0, "default", "capacity-block", "",
                            None, _tags("r-old", self.OLD)) for r, state in self.blocks.items()]


class FakeClock:
    """A clock whose sleeps pass at once: a 300 s bound is reached in no time."""

    def __init__(self) -> None:
        self.t = 0.0

    def clock(self) -> Clock:
        return Clock(sleep=self.advance, monotonic=lambda: self.t)

    def advance(self, seconds: float) -> None:
        self.t += seconds


@pytest.fixture
def region(monkeypatch) -> Region:
    """The sweep's region, as ``Region`` (a test may change it before sweeping)."""
    ec2 = Region()
    monkeypatch.setattr(teardown_tasks, "RegionWiring", lambda name: type("W", (), {"capacity": ec2.capacity,
                                                                                  "instances": ec2.ports})())
    monkeypatch.setattr(teardown_tasks, "CLOCK", FakeClock().clock())
    return ec2


def _sweep(apply: bool, active: list[str]) -> dict:
    with disable_run_logger():
        return teardown_tasks.sweep.fn("us-east-2", apply, active)


@pytest.mark.parametrize("apply", [False, True])
def test_the_sweep_reports_leaks_as_an_event_with_their_ids_and_whether_it_released_them(
        region, emitted, secret_env, apply):
    result = _sweep(apply, ["r-live"])
    assert [f["action"] for f in result["stale"]] == ["released" if apply else "would release"] * 2
    [event] = emitted
    assert event["event"] == "pdlift.sweep.leaks"
    assert event["resource"]["prefect.resource.id"] == "pdlift.sweep.us-east-2"
    assert event["related"] == [{"prefect.resource.id": "pdlift.deployment.dep-a", "prefect.resource.name": "dep-a",
                                 "prefect.resource.role": "deployment"}]
    payload = event["payload"]
    assert payload["count"] == 2 and payload["resource_ids"] == ["i-leak", "pg-leak"]
    assert payload["apply"] is apply and payload["active_runs"] == ["r-live"]
    assert (payload["released_count"], payload["kept_count"], payload["failed_count"]) == ((2, 0, 0) if apply
                                                                                           else (0, 0, 0))
    assert payload["released"] == (["i-leak", "pg-leak"] if apply else []) and payload["error"] == ""
    if apply:
        assert region.instances["i-leak"][0] == "terminated" and "pg-leak" not in region.groups
        assert region.instances["i-live"][0] == "running"  # of an active run: untouched
        assert payload["next"] == "nothing: every one was released"
    else:
        assert region.instances["i-leak"][0] == "running" and "pg-leak" in region.groups
        assert payload["next"].endswith("pdlift sweep --region us-east-2 --active-run r-live --apply")
    assert CANARY not in json.dumps(event)


def test_a_release_that_fails_still_reports_what_it_released_and_what_still_bills_then_fails_the_sweep(
        region, emitted):
    region.group_in_use = True  # never free: release() gives up after its bound with StageFailed
    with pytest.raises(StageFailed, match="placement group pg-leak still in use"):
        _sweep(True, ["r-live"])
    [event] = emitted
    payload = event["payload"]
    assert (payload["released_count"], payload["kept_count"], payload["failed_count"]) == (1, 0, 1)
    assert payload["released"] == ["i-leak"] and payload["failed"] == ["pg-leak"]  # the instance did go
    assert [r["status"] for r in payload["resources"]] == ["released", "failed"]
    assert payload["error"].startswith("StageFailed: placement group pg-leak still in use")
    assert payload["next"].startswith("1 resource(s) NOT released")
    subject, body = _render(_specs()["pdlift-sweep-leaks"], event["event"], payload,
                            resource_id=event["resource"]["prefect.resource.id"])
    assert subject == "pdlift sweep us-east-2: 2 leaked resource(s): 1 released, 1 NOT released (the release failed)"
    assert "The release failed: StageFailed: placement group pg-leak still in use" in body
    assert "- placement-group pg-leak: NOT released" in body and "- instance i-leak: released" in body


def test_a_release_refused_at_once_reports_every_leak_still_billing_without_the_secret_its_error_quotes(
        region, emitted, monkeypatch):
    monkeypatch.setenv("PDLIFT_NOTIFY_WEBHOOK", WEBHOOK)
    region.ports.terminate.side_effect = RuntimeError(f"TerminateInstances refused: {WEBHOOK} and "
                                                      f"https://ec2.example.com/?X-Amz-Security-Token={CANARY}")
    with pytest.raises(RuntimeError, match="TerminateInstances refused"):
        _sweep(True, ["r-live"])
    [event] = emitted
    payload = event["payload"]
    assert (payload["released_count"], payload["failed_count"]) == (0, 2) and payload["failed"] == ["i-leak", "pg-leak"]
    assert payload["error"] == "RuntimeError: TerminateInstances refused: *** and https://ec2.example.com/?***"
    assert CANARY not in json.dumps(event)


def test_a_capacity_block_the_sweep_cannot_cancel_is_reported_kept_not_released(monkeypatch, emitted):
    ec2 = Region(capacity_block=True)
    monkeypatch.setattr(teardown_tasks, "RegionWiring", lambda name: type("W", (), {"capacity": ec2.capacity,
                                                                                  "instances": ec2.ports})())
    result = _sweep(True, ["r-live"])
    [event] = emitted
    payload = event["payload"]
    assert (payload["released_count"], payload["kept_count"], payload["failed_count"]) == (2, 1, 0)
    assert "cr-block" not in payload["released"] and payload["failed"] == []
    assert [r["status"] for r in payload["resources"] if r["id"] == "cr-block"] == ["kept"]
    [kept] = payload["kept"]
    assert kept.startswith("capacity block cr-block") and "cannot be cancelled" in kept
    assert any(line.startswith("kept capacity block cr-block") for line in result["released"])  # the report's lines
    assert {f["resource_id"]: f["action"] for f in result["stale"]}["cr-block"] == \
        "kept: a Capacity Block cannot be cancelled"  # the sweep's table and `pdlift sweep` say so too
    subject, body = _render(_specs()["pdlift-sweep-leaks"], event["event"], payload,
                            resource_id=event["resource"]["prefect.resource.id"])
    assert subject == "pdlift sweep us-east-2: 3 leaked resource(s): 2 released, 1 kept (cannot be cancelled)"
    assert "- capacity-block cr-block: kept" in body and f"Kept: {kept}" in body
    assert "Capacity Block cannot be cancelled" in payload["next"]


def test_a_sweep_that_finds_nothing_stale_emits_nothing(region, emitted):
    region.instances.clear()
    region.groups.clear()
    _sweep(False, [])
    assert emitted == []


def test_the_gate_event_is_named_by_its_outcome_about_the_deployment():
    event = notifications.gate_event("dep-a", "INCONCLUSIVE", {"run_id": "r1"})
    assert event == {"event": "pdlift.gate.inconclusive", "payload": {"run_id": "r1"},
                     "resource": {"prefect.resource.id": "pdlift.deployment.dep-a", "prefect.resource.name": "dep-a"}}


def test_only_secret_looking_variables_are_redacted_and_long_errors_are_cut():
    env = {"GITHUB_TOKEN": "ghp_abcdef", "HOME": "/home/op", "MY_PASSWORD": "hunter22", "FLAG": "1"}
    assert sorted(notifications.secret_values(env)) == ["ghp_abcdef", "hunter22"]
    line = notifications.error_line(ValueError("x" * 1000), [])
    assert len(line) == notifications.MAX_ERROR_CHARS and line.startswith("ValueError: xxx")


@pytest.mark.parametrize("url", ["", "ftp://hooks.example.com/x", "hooks.example.com/x", "http:///path"])
def test_a_webhook_that_is_not_an_http_url_is_refused_without_echoing_it(url):
    with pytest.raises(ConfigError) as refused:
        notifications.check_webhook_url(url)
    assert not url or url not in str(refused.value)


# --- the automations file, rendered as the Prefect server renders it --------------------------------


def _specs(ui: str = "http://127.0.0.1:4200") -> dict[str, dict]:
    from prefect.events.schemas.automations import AutomationCore

    specs = notifications.automation_specs(load_spec(), str(uuid.uuid4()), ui)
    for spec in specs:
        AutomationCore.model_validate(spec)  # what the installer sends
    return {s["name"]: s for s in specs}


def _render(spec: dict, event_name: str, payload: dict, flow_run_id: str | None = None,
            resource_id: str = "pdlift.deployment.dep-a") -> tuple[str, str]:
    from prefect.server.events.schemas.events import ReceivedEvent
    from prefect.server.utilities.user_templates import render_user_template_sync

    event = ReceivedEvent(event=event_name, resource={"prefect.resource.id": resource_id,
                                                      "prefect.resource.name": resource_id.rsplit(".", 1)[1]},
                          payload=payload, id=uuid.uuid4(), occurred=datetime.datetime.now(datetime.timezone.utc))
    flow_run = type("FlowRun", (), {"id": flow_run_id})() if flow_run_id else None
    [action] = spec["actions"]
    context = {"event": event, "flow_run": flow_run}
    return (render_user_template_sync(action["subject"], context),
            render_user_template_sync(action["body"], context))


def test_each_event_has_one_reactive_automation_that_notifies_through_the_block():
    specs = _specs()
    expected = {"pdlift-gate-fail": "pdlift.gate.fail", "pdlift-gate-inconclusive": "pdlift.gate.inconclusive",
                "pdlift-run-failed-billing": "pdlift.run.failed-billing", "pdlift-sweep-leaks": "pdlift.sweep.leaks"}
    assert {name: spec["trigger"]["expect"] for name, spec in specs.items()} == {k: [v] for k, v in expected.items()}
    for spec in specs.values():
        assert spec["trigger"]["posture"] == "Reactive" and spec["trigger"]["threshold"] == 1
        assert [a["type"] for a in spec["actions"]] == ["send-notification"]
    assert not any("pdlift.gate.pass" in json.dumps(s["trigger"]) for s in specs.values())


def test_a_gate_fail_message_names_the_deployment_the_run_the_verdict_and_links_the_flow_run():
    flow_run = str(uuid.uuid4())
    subject, body = _render(_specs()["pdlift-gate-fail"], "pdlift.gate.fail",
                            {"outcome": "FAIL", "run_id": "r-7", "colour": "green",
                             "reasons": ["short@4: tpot_mean +20.3% (allowed +10%)", "b", "c", "d"]}, flow_run)
    assert subject == "pdlift dep-a: gate FAIL, run r-7"
    assert "Deployment: dep-a" in body and "Run: r-7 (candidate colour green)" in body
    assert "Verdict: FAIL" in body and "tpot_mean +20.3%" in body and "; d" not in body
    # True of every strategy: blue/green rolls the candidate back; recreate and rolling (in place)
    # restore the previous version; the event comes before either, so it promises neither done.
    assert "not promoted" in body and "in-place update (recreate, rolling) restores the previous version" in body
    assert "production is unchanged" not in body and "is rolled back" not in body
    assert f"Link: http://127.0.0.1:4200/runs/flow-run/{flow_run}" in body


def test_an_inconclusive_gate_that_rolls_back_says_so_and_asks_nobody():
    subject, body = _render(_specs()["pdlift-gate-inconclusive"], "pdlift.gate.inconclusive",
                            {"outcome": "INCONCLUSIVE", "run_id": "r-8", "colour": "blue", "undecided": "rollback",
                             "reasons": ["ttft_mean upper bound 1.08 beyond 1.05"], "approval_timeout_s": 3600}, "fr-1")
    assert subject == "pdlift dep-a: gate INCONCLUSIVE, run r-8 rolls the candidate back"
    assert "not shown non-inferior within its budget" in body and "upper bound 1.08" in body
    assert "approve" not in body.lower() and "3600" not in body
    assert "The run: http://127.0.0.1:4200/runs/flow-run/fr-1" in body


def test_an_inconclusive_gate_message_says_the_run_waits_for_approval_and_where():
    subject, body = _render(_specs()["pdlift-gate-inconclusive"], "pdlift.gate.inconclusive",
                            {"outcome": "INCONCLUSIVE", "run_id": "r-8", "colour": "blue", "undecided": "ask",
                             "reasons": ["too few samples"], "approval_timeout_s": 3600}, "fr-1")
    assert "waits for approval" in subject and "Verdict: INCONCLUSIVE" in body
    assert "up to 3600 s" in body and "Approve or reject: http://127.0.0.1:4200/runs/flow-run/fr-1" in body
    assert "no answer, is a FAIL" in body and "restores the previous version" in body


def test_a_failed_billing_message_lists_the_cost_the_resources_and_the_teardown_command():
    entries = [LedgerEntry("instance", f"i-{k:02}", "launch", "us-east-2a", 63.3) for k in range(12)]
    event = notifications.failed_billing_event("dep-a", "r-9", "bp.yaml", "fabric", RuntimeError("boom"), entries,
                                               759.6, {})
    subject, body = _render(_specs()["pdlift-run-failed-billing"], event["event"], event["payload"])
    assert subject == "pdlift dep-a: run r-9 FAILED at fabric, still billing $759.60/h"
    assert "Verdict: FAILED: RuntimeError: boom" in body
    assert "- instance i-09 us-east-2a ($63.30/h)" in body and "i-10" not in body and "- and 2 more" in body
    assert "pdlift teardown bp.yaml --run-id r-9" in body
    assert "Link: http://127.0.0.1:4200/events?resource=pdlift.deployment.dep-a" in body  # no flow run: its events


def test_a_sweep_message_names_the_leaks_and_what_to_do():
    stale = [dataclasses.asdict(_found("instance", "i-leak", "r-old"))]
    event = notifications.sweep_leaks_event("us-east-2", False, [], stale)
    subject, body = _render(_specs()["pdlift-sweep-leaks"], event["event"], event["payload"],
                            resource_id=event["resource"]["prefect.resource.id"])
    assert subject == "pdlift sweep us-east-2: 1 leaked resource(s), listed only (dry run)"
    assert "released" not in subject and "- instance i-leak (deployment" in body  # no status on a dry run
    assert "Deployment(s): dep-a" in body and "- instance i-leak (deployment dep-a, run r-old" in body
    assert "listed only (dry run)" in body and "pdlift sweep --region us-east-2 --apply" in body
